package bunx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestOutboxesWithTablePrefixes binds three Outboxes of ONE schema to one db: the schema's unprefixed
// outbox (by Record) and two with table prefixes, orders_ (by model hooks) and billing_ (by Record).
// Each writes only into its own table, also with prepared statements (which the three share per
// connection); a repeated event id is an ErrDuplicateEvent in a prefixed table too; Cancel finds only
// its own outbox's events.
func TestOutboxesWithTablePrefixes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	_, err := db.NewCreateTable().Model((*Order)(nil)).Exec(ctx)
	require.NoError(t, err)
	s := outboxtest.TenantSchema(t, db, "tenant_tp_")
	outboxtest.TenantTables(t, db, s, "orders_")
	outboxtest.TenantTables(t, db, s, "billing_")

	var opts []bunx.Option
	if !outboxtest.Pooled() { // prepared statements are not for a transaction pooler
		opts = append(opts, bunx.WithPreparedStatements())
	}
	obOrders := bunx.New(db, append(opts, bunx.WithLocation(model.Location{TablePrefix: "orders_", Schema: s}))...) // either order
	bunx.OnInsert(obOrders, func(_ context.Context, o *Order) ([]*model.Event, error) {
		ev, err := model.NewEvent("orders.placed", orderEvent{Ref: o.Ref})
		return []*model.Event{ev}, err
	})
	obBilling := bunx.New(db, append(opts, bunx.WithLocation(model.Location{Schema: s, TablePrefix: "billing_"}))...)
	obPlain := bunx.New(db, append(opts, bunx.WithLocation(model.Location{Schema: s}))...)

	const n = 20
	var billingIDs []uuid.UUID
	for i := range n {
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(&Order{Ref: fmt.Sprint("o", i)}).Exec(ctx); err != nil {
				return err
			}
			evB, err := model.NewEvent("billing.noted", nil)
			if err != nil {
				return err
			}
			billingIDs = append(billingIDs, evB.EventID)
			evP, err := model.NewEvent("plain.noted", nil)
			if err != nil {
				return err
			}
			if err := obBilling.Record(ctx, tx, evB); err != nil {
				return err
			}
			return obPlain.Record(ctx, tx, evP)
		}))
	}
	names := func(table string) map[string]int {
		var rows []string
		require.NoError(t, db.NewRaw("SELECT event_name FROM "+table).Scan(ctx, &rows))
		m := map[string]int{}
		for _, r := range rows {
			m[r]++
		}
		return m
	}
	require.Equal(t, map[string]int{"orders.placed": n}, names(`"`+s+`".orders_outbox_events`))
	require.Equal(t, map[string]int{"billing.noted": n}, names(`"`+s+`".billing_outbox_events`))
	require.Equal(t, map[string]int{"plain.noted": n}, names(`"`+s+`".outbox_events`))

	again, err := model.NewEvent("billing.noted", nil, model.WithEventID(billingIDs[0]))
	require.NoError(t, err)
	err = obBilling.Record(ctx, db, again)
	require.ErrorIs(t, err, bunx.ErrDuplicateEvent, "the prefixed unique constraint is told apart: %v", err)
	require.ErrorContains(t, err, billingIDs[0].String())

	require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return obBilling.Cancel(ctx, tx, billingIDs[1])
	}))
	var cancelled int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM "`+s+`".billing_outbox_events WHERE cancelled_at IS NOT NULL`).Scan(ctx, &cancelled))
	require.Equal(t, 1, cancelled)
	err = obOrders.Cancel(ctx, db, billingIDs[2])
	require.ErrorIs(t, err, bunx.ErrUnknownEvent, "an Outbox cancels only the events of its own table")
	err = obPlain.Cancel(ctx, db, billingIDs[2])
	require.ErrorIs(t, err, bunx.ErrUnknownEvent, "nor does the schema's unprefixed one")
}

// TestWithLocationRefusesABadTablePrefix: an Outbox with a table prefix bunbox cannot use fails every write
// with an error naming the option and the value, and writes nothing; a valid option given later replaces
// it; a schema and prefix whose NOTIFY channel would not fit 63 bytes are refused.
func TestWithLocationRefusesABadTablePrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.Unconnected(t)
	ev, err := model.NewEvent("x", nil)
	require.NoError(t, err)
	ob := bunx.New(db, bunx.WithLocation(model.Location{TablePrefix: "Orders_"}))
	err = ob.Record(ctx, db, ev)
	require.ErrorContains(t, err, `bunx: WithLocation: model: Location.TablePrefix: invalid table prefix "Orders_": use lowercase ASCII letters, digits and underscores`)
	err = ob.Cancel(ctx, db, ev.EventID)
	require.Error(t, err)
	require.False(t, errors.Is(err, bunx.ErrUnknownEvent))

	long := "s23456789012345678901234567890123456789012345678"
	ob = bunx.New(db, bunx.WithLocation(model.Location{Schema: long, TablePrefix: "orders_"}))
	require.ErrorContains(t, ob.Record(ctx, db, ev), "bunx: WithLocation: model: Location.TablePrefix: invalid table prefix \"orders_\": with schema")
	ob = bunx.New(db, bunx.WithLocation(model.Location{TablePrefix: "orders_", Schema: "a b"}))
	require.ErrorContains(t, ob.Record(ctx, db, ev), "bunx: WithLocation: model: Location.Schema: invalid schema name")
}
