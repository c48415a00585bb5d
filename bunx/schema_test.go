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

// TestOutboxesInSchemas binds three Outboxes to one db: one in a schema (by model hooks), one in a schema
// whose name has uppercase letters (by Record), one with the default names (by Record). Each writes only
// into its own table, also with prepared statements (which the three share per connection), and Cancel
// finds only its own outbox's events.
func TestOutboxesInSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	_, err := db.NewCreateTable().Model((*Order)(nil)).Exec(ctx)
	require.NoError(t, err)
	a := outboxtest.TenantSchema(t, db, "tenant_a_")
	b := outboxtest.TenantSchema(t, db, "Tenant_B_")

	var opts []bunx.Option
	if !outboxtest.Pooled() { // prepared statements are not for a transaction pooler
		opts = append(opts, bunx.WithPreparedStatements())
	}
	obA := bunx.New(db, append(opts, bunx.WithLocation(model.Location{Schema: a}))...)
	bunx.OnInsert(obA, func(_ context.Context, o *Order) ([]*model.Event, error) {
		ev, err := model.NewEvent("a.placed", orderEvent{Ref: o.Ref})
		return []*model.Event{ev}, err
	})
	obB := bunx.New(db, append(opts, bunx.WithLocation(model.Location{Schema: b}))...)
	obDefault := bunx.New(db, opts...)

	const n = 20
	var bIDs []uuid.UUID
	for i := range n {
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewInsert().Model(&Order{Ref: fmt.Sprint("o", i)}).Exec(ctx); err != nil {
				return err
			}
			evB, err := model.NewEvent("b.noted", nil)
			if err != nil {
				return err
			}
			bIDs = append(bIDs, evB.EventID)
			evD, err := model.NewEvent("default.noted", nil)
			if err != nil {
				return err
			}
			if err := obB.Record(ctx, tx, evB); err != nil {
				return err
			}
			return obDefault.Record(ctx, tx, evD)
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
	require.Equal(t, map[string]int{"a.placed": n}, names(`"`+a+`".outbox_events`))
	require.Equal(t, map[string]int{"b.noted": n}, names(`"`+b+`".outbox_events`))
	require.Equal(t, map[string]int{"default.noted": n}, names("outbox_events"), "the default Outbox writes where search_path says")

	require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return obB.Cancel(ctx, tx, bIDs[0])
	}))
	var cancelled int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM "`+b+`".outbox_events WHERE cancelled_at IS NOT NULL`).Scan(ctx, &cancelled))
	require.Equal(t, 1, cancelled)
	err = obA.Cancel(ctx, db, bIDs[1])
	require.ErrorIs(t, err, bunx.ErrUnknownEvent, "an Outbox cancels only the events of its own schema")
}

// TestWithLocationRefusesABadSchema: an Outbox with a schema name bunbox cannot quote safely fails every
// write with an error naming the name, and writes nothing.
func TestWithLocationRefusesABadSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.Unconnected(t)
	ob := bunx.New(db, bunx.WithLocation(model.Location{Schema: `tenant"; DROP TABLE outbox_events; --`}))
	ev, err := model.NewEvent("x", nil)
	require.NoError(t, err)
	err = ob.Record(ctx, db, ev)
	require.ErrorContains(t, err, `bunx: WithLocation: model: Location.Schema: invalid schema name "tenant\"; DROP TABLE outbox_events; --"`)
	err = ob.Cancel(ctx, db, ev.EventID)
	require.Error(t, err)
	require.False(t, errors.Is(err, bunx.ErrUnknownEvent))
}
