package bunx_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/model"
)

// ShadowedOrder embeds bunx.Hooks and declares an AfterInsert of its own that does not call bunx: Go's method
// promotion makes bun call this method, and bunx.Hooks.AfterInsert never runs.
type ShadowedOrder struct {
	bun.BaseModel `bun:"table:shadowed_orders"`
	bunx.Hooks    `bun:"-"`
	ID            int64 `bun:",pk,autoincrement"`
}

func (*ShadowedOrder) AfterInsert(context.Context, *bun.InsertQuery) error { return nil }

// CallThroughOrder embeds bunx.Hooks and declares an AfterInsert of its own that calls bunx.AfterInsert:
// correct, and accepted.
type CallThroughOrder struct {
	bun.BaseModel `bun:"table:call_through_orders"`
	bunx.Hooks    `bun:"-"`
	ID            int64 `bun:",pk,autoincrement"`
	Ref           string
}

func (*CallThroughOrder) AfterInsert(ctx context.Context, q *bun.InsertQuery) error {
	return bunx.AfterInsert(ctx, q)
}

// ForgetfulOwnHook does not embed bunx.Hooks; its own AfterInsert forgets to call bunx.
type ForgetfulOwnHook struct {
	bun.BaseModel `bun:"table:forgetful_own_hooks"`
	ID            int64 `bun:",pk,autoincrement"`
}

func (*ForgetfulOwnHook) AfterInsert(context.Context, *bun.InsertQuery) error { return nil }

// QueryingShadow embeds bunx.Hooks and its own AfterUpdate runs a statement before calling bunx: under the
// registration's probe the statement fails (the probe has no database), so bunx is never reached.
type QueryingShadow struct {
	bun.BaseModel `bun:"table:querying_shadows"`
	bunx.Hooks    `bun:"-"`
	ID            int64 `bun:",pk,autoincrement"`
}

func (*QueryingShadow) AfterUpdate(ctx context.Context, q *bun.UpdateQuery) error {
	if _, err := q.NewRaw("SELECT 1").Exec(ctx); err != nil {
		return err
	}
	return bunx.AfterUpdate(ctx, q)
}

// PanickingShadow's own AfterDelete panics on a zero value.
type PanickingShadow struct {
	bun.BaseModel `bun:"table:panicking_shadows"`
	bunx.Hooks    `bun:"-"`
	ID            int64 `bun:",pk,autoincrement"`
	Owner         *struct{ Name string }
}

func (p *PanickingShadow) AfterDelete(ctx context.Context, q *bun.DeleteQuery) error {
	_ = q.GetModel().Value().(*PanickingShadow).Owner.Name
	return bunx.AfterDelete(ctx, q)
}

func none[T any](context.Context, *T) ([]*model.Event, error) { return nil, nil }

func TestRegisterRefusesAHookThatNeverReachesBunx(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("ShadowedByTheModel", func(t *testing.T) {
		require.PanicsWithValue(t,
			"bunx.OnInsert[bunx_test.ShadowedOrder]: bunx_test.ShadowedOrder embeds bunx.Hooks, but its own AfterInsert method "+
				"shadows bunx.Hooks.AfterInsert (Go's method promotion: bun calls the model's method) and does not call "+
				"bunx.AfterInsert: no event would ever be written. End the method with `return bunx.AfterInsert(ctx, q)`, "+
				"or remove it and let the embedded bunx.Hooks supply it",
			func() { bunx.OnInsert(b.ob, none[ShadowedOrder]) })
		require.NotPanics(t, func() { bunx.OnUpdate(b.ob, none[ShadowedOrder]) }, "AfterUpdate is bunx.Hooks' own")
		require.NotPanics(t, func() { bunx.OnDelete(b.ob, none[ShadowedOrder]) }, "AfterDelete is bunx.Hooks' own")
	})

	t.Run("OwnHookWithoutHooks", func(t *testing.T) {
		require.PanicsWithValue(t,
			"bunx.OnInsert[bunx_test.ForgetfulOwnHook]: bunx_test.ForgetfulOwnHook's AfterInsert method does not call "+
				"bunx.AfterInsert: no event would ever be written. End the method with `return bunx.AfterInsert(ctx, q)`, "+
				"or remove it and let the embedded bunx.Hooks supply it",
			func() { bunx.OnInsert(b.ob, none[ForgetfulOwnHook]) })
	})

	t.Run("StatementBeforeBunx", func(t *testing.T) {
		msg := panicMessage(t, func() { bunx.OnUpdate(b.ob, none[QueryingShadow]) })
		require.Contains(t, msg, "shadows bunx.Hooks.AfterUpdate")
		require.Contains(t, msg, "it returned: bunx: the registration probe has no database")
	})

	t.Run("PanicOnAZeroValue", func(t *testing.T) {
		msg := panicMessage(t, func() { bunx.OnDelete(b.ob, none[PanickingShadow]) })
		require.Contains(t, msg, "shadows bunx.Hooks.AfterDelete")
		require.Contains(t, msg, "it panicked: runtime error: invalid memory address or nil pointer dereference")
	})
}

func panicMessage(t *testing.T, fn func()) (msg string) {
	t.Helper()
	defer func() {
		p := recover()
		require.NotNil(t, p, "the registration must panic")
		msg, _ = p.(string)
	}()
	fn()
	return ""
}

// TestOwnHookThatCallsBunxIsAccepted shows that a model that embeds bunx.Hooks and has its own AfterInsert
// that calls bunx.AfterInsert is accepted and writes its events, and that the registration's probe wrote
// nothing.
func TestOwnHookThatCallsBunxIsAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.NewCreateTable().Model((*CallThroughOrder)(nil)).Exec(ctx)
	require.NoError(t, err)
	require.NotPanics(t, func() {
		bunx.OnInsert(b.ob, func(_ context.Context, o *CallThroughOrder) ([]*model.Event, error) {
			ev, err := model.NewEvent("call_through.created", orderEvent{ID: o.ID, Ref: o.Ref})
			return []*model.Event{ev}, err
		})
	})
	require.Empty(t, b.events(t), "the probe writes nothing")

	o := &CallThroughOrder{Ref: "ct"}
	require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(o).Exec(ctx)
		return err
	}))
	evs := b.events(t)
	require.Len(t, evs, 1)
	require.Equal(t, "call_through.created", evs[0].Name)
	require.Equal(t, orderEvent{ID: o.ID, Ref: "ct"}, payloadOf(t, evs[0]))
}

func TestHookOnAQueryWithoutDatabase(t *testing.T) {
	t.Parallel()
	// bunx's hook on a query no Outbox is bound to does nothing, outside a registration's probe.
	require.NoError(t, bunx.AfterInsert(context.Background(), bun.NewInsertQuery(nil)))
}
