package bunx_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// setupOrders is setup with n committed orders (their events included), returned in id order.
func setupOrders(t *testing.T, n int) (*testBundle, []Order) {
	t.Helper()
	b := setup(t)
	orders := make([]Order, n)
	for i := range orders {
		orders[i] = Order{Ref: fmt.Sprintf("o-%d", i)}
	}
	_, err := b.db.NewInsert().Model(&orders).Exec(context.Background())
	require.NoError(t, err)
	return b, orders
}

func (b *testBundle) statuses(t *testing.T) []string {
	t.Helper()
	var s []string
	require.NoError(t, b.db.NewSelect().Model((*Order)(nil)).Column("status").Order("id").Scan(context.Background(), &s))
	return s
}

// TestUpdateHookRefusesRowsTheModelDoesNotDescribe: an UPDATE whose rows the model value does not describe
// fails with ErrModelNotRows, and its transaction with it, rather than write an event built from the
// model's values (before the fix: one event of zero values for a Set/Where that touched 5 rows, and
// "status": "" for a Set with WherePK).
func TestUpdateHookRefusesRowsTheModelDoesNotDescribe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := map[string]func(tx bun.Tx, orders []Order) *bun.UpdateQuery{
		"SetWhere": func(tx bun.Tx, _ []Order) *bun.UpdateQuery {
			return tx.NewUpdate().Model(&Order{}).Set("status = ?", "bulk").Where("ref <> ''")
		},
		"SetWherePK": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			return tx.NewUpdate().Model(&Order{ID: o[0].ID}).Set("status = ?", "delivered").WherePK()
		},
		"ColumnSubset": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			return tx.NewUpdate().Model(&Order{ID: o[0].ID, Status: "paid"}).Column("status").WherePK()
		},
		"ExcludeColumn": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			return tx.NewUpdate().Model(&Order{ID: o[0].ID, Status: "paid"}).ExcludeColumn("ref").WherePK()
		},
		"OmitZero": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			return tx.NewUpdate().Model(&Order{ID: o[0].ID, Status: "paid"}).OmitZero().WherePK()
		},
		"Value": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			row := o[0]
			return tx.NewUpdate().Model(&row).Value("status", "upper(status)").WherePK()
		},
		"WhereBeyondThePK": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			row := o[0]
			row.Status = "paid"
			return tx.NewUpdate().Model(&row).WherePK().Where("status = 'new'")
		},
		"WhereInsteadOfWherePK": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			row := o[0]
			row.Ref, row.Status = "moved", "paid"
			return tx.NewUpdate().Model(&row).Where("id = ?", o[1].ID) // updates another row with o[0]'s values
		},
		"WherePKOfOtherColumns": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			row := o[0]
			row.Status = "paid"
			return tx.NewUpdate().Model(&row).WherePK("ref")
		},
		"SliceSetWhere": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			rows := []Order{o[0], o[1]}
			return tx.NewUpdate().Model(&rows).Set("status = 'x'").WherePK()
		},
		"BulkColumnSubset": func(tx bun.Tx, o []Order) *bun.UpdateQuery {
			rows := []Order{o[0], o[1]}
			rows[0].Status, rows[1].Status = "a", "b"
			return tx.NewUpdate().Model(&rows).Column("status").Bulk()
		},
	}
	for name, update := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, orders := setupOrders(t, 5)
			err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := update(tx, orders).Exec(ctx)
				return err
			})
			require.ErrorIs(t, err, bunx.ErrModelNotRows)
			require.ErrorContains(t, err, "bunx.OnUpdate[bunx_test.Order]:")
			require.ErrorContains(t, err, "Outbox.Record")
			require.Equal(t, []string{"new", "new", "new", "new", "new"}, b.statuses(t), "the business change rolled back")
			require.Len(t, b.events(t), 5, "only the five order.placed events")
		})
	}
}

// TestUpdateHookFullModelByPrimaryKey: the updates a hook describes write one true event per row.
func TestUpdateHookFullModelByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WherePK", func(t *testing.T) {
		t.Parallel()
		b, orders := setupOrders(t, 2)
		row := orders[1]
		row.Ref = "renamed"
		require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewUpdate().Model(&row).WherePK().Exec(ctx)
			return err
		}))
		evs := b.events(t)
		require.Len(t, evs, 3)
		require.Equal(t, "order.updated", evs[2].Name)
		require.Equal(t, orderEvent{ID: orders[1].ID, Ref: "renamed"}, payloadOf(t, evs[2]))
	})

	t.Run("WherePKReturning", func(t *testing.T) {
		t.Parallel()
		b, orders := setupOrders(t, 1)
		row := orders[0]
		row.Status = "paid"
		_, err := b.db.NewUpdate().Model(&row).WherePK().Returning("*").Exec(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"order.placed", "order.updated"}, b.eventNames(t))
	})

	t.Run("Bulk", func(t *testing.T) {
		t.Parallel()
		b, orders := setupOrders(t, 3)
		rows := []*Order{&orders[0], &orders[2]}
		rows[0].Ref, rows[1].Ref = "bulk-0", "bulk-2"
		require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewUpdate().Model(&rows).Bulk().Exec(ctx)
			return err
		}))
		evs := b.events(t)
		require.Len(t, evs, 5)
		require.Equal(t, orderEvent{ID: orders[0].ID, Ref: "bulk-0"}, payloadOf(t, evs[3]))
		require.Equal(t, orderEvent{ID: orders[2].ID, Ref: "bulk-2"}, payloadOf(t, evs[4]))
	})

	t.Run("BulkPartlyMatched", func(t *testing.T) {
		t.Parallel()
		b, orders := setupOrders(t, 1)
		rows := []Order{orders[0], {ID: -1, Ref: "missing"}}
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewUpdate().Model(&rows).Bulk().Exec(ctx)
			return err
		})
		require.ErrorContains(t, err, "touched 1 of the 2 rows")
		require.Len(t, b.events(t), 1)
	})

	t.Run("NilModelSetBasedIsRecordsJob", func(t *testing.T) {
		t.Parallel()
		b, _ := setupOrders(t, 2)
		_, err := b.db.NewUpdate().Model((*Order)(nil)).Set("status = 'void'").Where("TRUE").Exec(ctx)
		require.NoError(t, err, "a nil model has no rows: hooks see nothing, as documented")
		require.Len(t, b.events(t), 2)
	})
}

// SoftOrder is an order with a soft delete column.
type SoftOrder struct {
	bun.BaseModel `bun:"table:soft_orders"`
	bunx.Hooks    `bun:"-"`
	ID            int64     `bun:",pk,autoincrement"`
	Ref           string    `bun:",notnull"`
	DeletedAt     time.Time `bun:",soft_delete,nullzero"`
}

// TestDeleteHookRefusesRowsTheModelDoesNotDescribe: a DELETE that does not select its model's rows by
// primary key, or that touched more rows than its model holds, fails with ErrModelNotRows rather than write
// an event of the model's (zero) values.
func TestDeleteHookRefusesRowsTheModelDoesNotDescribe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WhereInsteadOfWherePK", func(t *testing.T) {
		t.Parallel()
		b, orders := setupOrders(t, 2)
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewDelete().Model(&Order{}).Where("id = ?", orders[1].ID).Exec(ctx)
			return err
		})
		require.ErrorIs(t, err, bunx.ErrModelNotRows)
		require.ErrorContains(t, err, "bunx.OnDelete[bunx_test.Order]:")
		require.ErrorContains(t, err, "Model(&row).WherePK()")
		require.EqualValues(t, 2, b.orders(t))
		require.Len(t, b.events(t), 2)
	})

	t.Run("WherePKOfASlice", func(t *testing.T) {
		t.Parallel()
		b, orders := setupOrders(t, 3)
		rows := []Order{orders[0], orders[2]}
		_, err := b.db.NewDelete().Model(&rows).WherePK().Returning("id").Exec(ctx)
		require.NoError(t, err)
		evs := b.events(t)
		require.Len(t, evs, 5)
		require.Equal(t, orderEvent{ID: orders[0].ID, Ref: orders[0].Ref}, payloadOf(t, evs[3]))
		require.Equal(t, orderEvent{ID: orders[2].ID, Ref: orders[2].Ref}, payloadOf(t, evs[4]))
	})

	t.Run("SoftDeleteMoreRowsThanTheModel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.NewCreateTable().Model((*SoftOrder)(nil)).Exec(ctx)
		require.NoError(t, err)
		bunx.OnDelete(b.ob, func(_ context.Context, o *SoftOrder) ([]*model.Event, error) {
			ev, err := model.NewEvent("soft.deleted", orderEvent{ID: o.ID, Ref: o.Ref})
			return []*model.Event{ev}, err
		})
		rows := []SoftOrder{{Ref: "a"}, {Ref: "b"}, {Ref: "c"}}
		_, err = b.db.NewInsert().Model(&rows).Exec(ctx)
		require.NoError(t, err)

		err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewDelete().Model(&SoftOrder{}).Where("ref <> ''").Exec(ctx)
			return err
		})
		require.ErrorIs(t, err, bunx.ErrModelNotRows)
		require.ErrorContains(t, err, "the statement touched 3 rows, more than the 1 of the model")
		require.Empty(t, b.events(t))

		_, err = b.db.NewDelete().Model(&rows[1]).WherePK().Exec(ctx)
		require.NoError(t, err)
		evs := b.events(t)
		require.Len(t, evs, 1)
		require.Equal(t, orderEvent{ID: rows[1].ID, Ref: "b"}, payloadOf(t, evs[0]))
		require.EqualValues(t, 1, outboxtest.Count(t, b.db, "soft_orders", "deleted_at IS NOT NULL"))
	})
}
