package bunx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

var errBusiness = errors.New("business rule failed")

func TestHookInsertCommitsWithTheRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	o := &Order{Ref: "A-1"}
	require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(o).Exec(ctx)
		return err
	}))

	evs := b.events(t)
	require.Len(t, evs, 1)
	require.Equal(t, "order.placed", evs[0].Name)
	require.Equal(t, model.DefaultQueue, evs[0].Queue)
	require.Equal(t, orderEvent{ID: o.ID, Ref: "A-1"}, payloadOf(t, evs[0]), "the hook sees the inserted row, id included")
	require.Nil(t, evs[0].PublishedAt)
}

func TestHookRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Error", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(&Order{Ref: "A"}).Exec(ctx); err != nil {
				return err
			}
			return errBusiness
		})
		require.ErrorIs(t, err, errBusiness)
		b.requireUnchanged(t)
	})

	t.Run("PanicInTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Panics(t, func() {
			_ = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				if _, err := tx.NewInsert().Model(&Order{Ref: "A"}).Exec(ctx); err != nil {
					return err
				}
				panic("boom")
			})
		})
		b.requireUnchanged(t)
	})

	t.Run("PanicInHandler", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bunx.OnInsert(b.ob, func(context.Context, *Order) ([]*model.Event, error) { panic("handler bug") })
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewInsert().Model(&Order{Ref: "A"}).Exec(ctx)
			return err
		})
		require.ErrorContains(t, err, "handler panicked: handler bug")
		b.requireUnchanged(t)
	})

	t.Run("Savepoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(&Order{Ref: "kept"}).Exec(ctx); err != nil {
				return err
			}
			err := tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error {
				if _, err := sp.NewInsert().Model(&Order{Ref: "rolled-back"}).Exec(ctx); err != nil {
					return err
				}
				return errBusiness
			})
			require.ErrorIs(t, err, errBusiness)
			return nil
		}))
		evs := b.events(t)
		require.Len(t, evs, 1)
		require.Equal(t, "kept", payloadOf(t, evs[0]).Ref)
		require.EqualValues(t, 1, b.orders(t))
	})
}

func TestHookSlices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Values", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		orders := []Order{{Ref: "a"}, {Ref: "b"}, {Ref: "c"}}
		_, err := b.db.NewInsert().Model(&orders).Exec(ctx)
		require.NoError(t, err)
		evs := b.events(t)
		require.Len(t, evs, 3)
		for i, ev := range evs {
			require.Equal(t, orderEvent{ID: orders[i].ID, Ref: orders[i].Ref}, payloadOf(t, ev))
		}
	})

	t.Run("Pointers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		orders := []*Order{{Ref: "a"}, {Ref: "b"}}
		require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewInsert().Model(&orders).Exec(ctx)
			return err
		}))
		require.Equal(t, []string{"order.placed", "order.placed"}, b.eventNames(t))
		require.Len(t, outboxEventIDs(t, b), 2, "every event has its own id")
	})
}

func outboxEventIDs(t *testing.T, b *testBundle) map[string]bool {
	ids := map[string]bool{}
	for _, ev := range b.events(t) {
		ids[ev.EventID.String()] = true
	}
	return ids
}

func TestHookOnConflictDoNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.NewInsert().Model(&Order{Ref: "dup"}).Exec(ctx)
	require.NoError(t, err)

	require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&Order{Ref: "dup"}).On("CONFLICT (ref) DO NOTHING").Exec(ctx)
		return err
	}))
	require.Len(t, b.events(t), 1, "the skipped row yields no event")

	all := []Order{{Ref: "dup"}}
	_, err = b.db.NewInsert().Model(&all).On("CONFLICT (ref) DO NOTHING").Exec(ctx)
	require.NoError(t, err)
	require.Len(t, b.events(t), 1, "a slice whose rows were all skipped yields none")

	some := []Order{{Ref: "dup"}, {Ref: "new"}}
	err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&some).On("CONFLICT (ref) DO NOTHING").Exec(ctx)
		return err
	})
	require.ErrorContains(t, err, "touched 1 of the 2 rows")
	require.Len(t, b.events(t), 1, "a partly skipped slice fails rather than guess")
	require.EqualValues(t, 1, b.orders(t))
}

func TestHookUpdateAndDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	o := &Order{Ref: "u"}
	_, err := b.db.NewInsert().Model(o).Exec(ctx)
	require.NoError(t, err)

	o.Status = "paid"
	_, err = b.db.NewUpdate().Model(o).WherePK().Exec(ctx)
	require.NoError(t, err)

	_, err = b.db.NewUpdate().Model(&Order{ID: 999, Ref: "ghost"}).WherePK().Exec(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"order.placed", "order.updated"}, b.eventNames(t), "an update that matched nothing yields nothing")

	_, err = b.db.NewUpdate().Model((*Order)(nil)).Set("status = 'void'").Where("TRUE").Exec(ctx)
	require.NoError(t, err)
	require.Len(t, b.events(t), 2, "hooks cannot see set-based updates")

	_, err = b.db.NewDelete().Model(o).WherePK().Exec(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"order.placed", "order.updated", "order.deleted"}, b.eventNames(t))
}

// OwnHooks has a hook method of its own and calls bunx.AfterInsert from it.
type OwnHooks struct {
	bun.BaseModel `bun:"table:own_hooks"`
	ID            int64 `bun:",pk,autoincrement"`
}

func (*OwnHooks) AfterInsert(ctx context.Context, q *bun.InsertQuery) error {
	return bunx.AfterInsert(ctx, q)
}

func TestModelWithItsOwnHook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.NewCreateTable().Model((*OwnHooks)(nil)).Exec(ctx)
	require.NoError(t, err)
	bunx.OnInsert(b.ob, func(_ context.Context, m *OwnHooks) ([]*model.Event, error) {
		ev, err := model.NewEvent("own.created", map[string]int64{"id": m.ID})
		return []*model.Event{ev}, err
	})
	_, err = b.db.NewInsert().Model(&OwnHooks{}).Exec(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"own.created"}, b.eventNames(t))
}

func TestHandlersOfOneTypeAllRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	bunx.OnInsert(b.ob, func(_ context.Context, o *Order) ([]*model.Event, error) {
		a, err := model.NewEvent("audit.a", nil)
		if err != nil {
			return nil, err
		}
		c, err := model.NewEvent("audit.b", nil, model.WithQueue("low"))
		return []*model.Event{a, c}, err
	})
	_, err := b.db.NewInsert().Model(&Order{Ref: "x"}).Exec(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"order.placed", "audit.a", "audit.b"}, b.eventNames(t))
	require.Equal(t, "low", b.events(t)[2].Queue)
}

func TestNoOutboxBoundMeansNoEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t) // no bunx.New on this database
	_, err := db.NewCreateTable().Model((*Order)(nil)).Exec(ctx)
	require.NoError(t, err)
	_, err = db.NewInsert().Model(&Order{Ref: "x"}).Exec(ctx)
	require.NoError(t, err)
	require.Zero(t, outboxtest.Count(t, db, "outbox_events", ""))
}

func TestHookOutsideTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.db.NewInsert().Model(&Order{Ref: "auto"}).Exec(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"order.placed"}, b.eventNames(t), "outside a transaction the event is a statement of its own")
}

func TestRegisterRefusesAModelWithoutHooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.PanicsWithValue(t,
		"bunx.OnInsert[bunx_test.PlainOrder]: bunx_test.PlainOrder has no AfterInsert method: embed bunx.Hooks (with `bun:\"-\"`) or call bunx.AfterInsert from its own AfterInsert",
		func() {
			bunx.OnInsert(b.ob, func(context.Context, *PlainOrder) ([]*model.Event, error) { return nil, nil })
		})
	require.Panics(t, func() {
		bunx.OnUpdate(b.ob, func(context.Context, *OwnHooks) ([]*model.Event, error) { return nil, nil })
	}, "OwnHooks has AfterInsert only")
}

// TestHookRowSkippedByATrigger checks that a row a BEFORE INSERT trigger skipped (it returned NULL, so
// the statement touched no row) yields no event, while the rows it let through do.
func TestHookRowSkippedByATrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.db.ExecContext(ctx, `CREATE FUNCTION skip_orders() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN IF NEW.ref LIKE 'skip%' THEN RETURN NULL; END IF; RETURN NEW; END $$`)
	require.NoError(t, err)
	_, err = b.db.ExecContext(ctx, `CREATE TRIGGER skip_orders BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION skip_orders()`)
	require.NoError(t, err)

	for _, ref := range []string{"skip-1", "keep-1", "skip-2", "keep-2"} {
		require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewInsert().Model(&Order{Ref: ref}).Exec(ctx)
			return err
		}))
	}
	require.EqualValues(t, 2, b.orders(t))
	require.Len(t, b.events(t), 2, "one event per row the trigger let through")
}
