package bunx_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
)

// setupClonedBefore is setup with a clone of the database made before bunx.New: it shares the pool (and so
// the Outbox's binding) but not bunx's query hook.
func setupClonedBefore(t *testing.T) (*testBundle, *bun.DB) {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	early := db.WithNamedArg("tenant", "t1")
	_, err := db.NewCreateTable().Model((*Order)(nil)).Exec(context.Background())
	require.NoError(t, err)
	b := bundleOn(t, db)
	return b, early
}

// TestCloneMadeBeforeNewFailsClosed: a *bun.DB cloned before bunx.New cannot count the rows its statements
// touch, so its model hooks write no event and fail the statement with ErrNoQueryHook; before the fix an
// UPDATE through it that matched no row wrote an order.updated event.
func TestCloneMadeBeforeNewFailsClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("UpdateThatMatchedNothing", func(t *testing.T) {
		t.Parallel()
		b, early := setupClonedBefore(t)
		err := early.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewUpdate().Model(&Order{ID: 999, Ref: "ghost"}).WherePK().Exec(ctx)
			return err
		})
		require.ErrorIs(t, err, bunx.ErrNoQueryHook)
		require.ErrorContains(t, err, "bunx.OnUpdate[bunx_test.Order]: bunx: this query ran on a *bun.DB without bunx's query hook")
		require.Empty(t, b.events(t), "no phantom event")
	})

	t.Run("Insert", func(t *testing.T) {
		t.Parallel()
		b, early := setupClonedBefore(t)
		err := early.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewInsert().Model(&Order{Ref: "early"}).Exec(ctx)
			return err
		})
		require.ErrorIs(t, err, bunx.ErrNoQueryHook)
		b.requireUnchanged(t)
	})

	t.Run("TheBoundDBAndLaterClonesStillWork", func(t *testing.T) {
		t.Parallel()
		b, _ := setupClonedBefore(t)
		late := b.db.WithNamedArg("tenant", "t2")
		o := &Order{Ref: "late"}
		_, err := late.NewInsert().Model(o).Exec(ctx)
		require.NoError(t, err)
		_, err = late.NewUpdate().Model(&Order{ID: 999, Ref: "ghost"}).WherePK().Exec(ctx)
		require.NoError(t, err)
		o.Status = "paid"
		require.NoError(t, late.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewUpdate().Model(o).WherePK().Exec(ctx)
			return err
		}))
		_, err = b.db.NewDelete().Model(o).WherePK().Exec(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"order.placed", "order.updated", "order.deleted"}, b.eventNames(t),
			"the update that matched nothing yields nothing")
	})

	t.Run("ModelWithoutHandlersIsNotRefused", func(t *testing.T) {
		t.Parallel()
		_, early := setupClonedBefore(t)
		_, err := early.NewCreateTable().Model((*CallThroughOrder)(nil)).Exec(ctx)
		require.NoError(t, err)
		_, err = early.NewInsert().Model(&CallThroughOrder{Ref: "x"}).Exec(ctx)
		require.NoError(t, err, "no handler is registered for CallThroughOrder: nothing to count")
	})
}

// TestNewTwiceWritesEventsOnce: bunx.New twice on one *bun.DB (and on a clone made after it) adds no
// second query hook that would count or write twice; each event is written once.
func TestNewTwiceWritesEventsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	second := bunx.New(b.db)
	clone := b.db.WithNamedArg("tenant", "t3")
	third := bunx.New(clone)
	require.NotNil(t, second)
	require.NotNil(t, third)

	for i, db := range []*bun.DB{b.db, clone} {
		o := &Order{Ref: fmt.Sprintf("twice-%d", i)}
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(o).Exec(ctx); err != nil {
				return err
			}
			o.Status = "paid"
			if _, err := tx.NewUpdate().Model(o).WherePK().Exec(ctx); err != nil {
				return err
			}
			_, err := tx.NewUpdate().Model(&Order{ID: -1, Ref: "none"}).WherePK().Exec(ctx)
			return err
		}))
		some := []Order{{Ref: o.Ref}, {Ref: o.Ref + "-new"}}
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewInsert().Model(&some).On("CONFLICT (ref) DO NOTHING").Exec(ctx)
			return err
		})
		require.ErrorContains(t, err, "touched 1 of the 2 rows", "the count is still right")
	}
	require.Equal(t, []string{"order.placed", "order.updated", "order.placed", "order.updated"}, b.eventNames(t))
	require.Len(t, outboxEventIDs(t, b), 4)
}

// bundleOn is setup's Outbox and handlers on a database whose orders table exists.
func bundleOn(t *testing.T, db *bun.DB) *testBundle {
	t.Helper()
	ob := bunx.New(db)
	registerOrderEvents(ob)
	return &testBundle{db: db, ob: ob}
}
