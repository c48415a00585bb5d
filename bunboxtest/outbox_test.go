package bunboxtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunboxtest"
	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/worker"
)

// TestEvents reads what a transaction wrote before it commits, and what committed after.
func TestEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	ob := bunx.New(db)
	placed, paid := newEvent(t, "order.placed", model.WithQueue("critical")), newEvent(t, "order.paid")

	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		require.NoError(t, ob.Record(ctx, tx, placed, paid))
		evs, err := bunboxtest.Events(ctx, tx)
		require.NoError(t, err)
		require.Len(t, evs, 2, "the transaction sees its own events")
		require.Equal(t, placed.EventID, evs[0].EventID)
		require.Equal(t, "critical", evs[0].Queue)
		require.JSONEq(t, `{"name":"order.placed"}`, string(evs[0].Payload))
		require.Nil(t, evs[0].PublishedAt)

		evs, err = bunboxtest.Events(ctx, tx, "order.paid")
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, paid.EventID, evs[0].EventID)

		evs, err = bunboxtest.Events(ctx, db)
		require.NoError(t, err)
		require.Empty(t, evs, "nothing committed yet")
		return errors.New("roll back")
	})
	require.Error(t, err)
	evs, err := bunboxtest.Events(ctx, db)
	require.NoError(t, err)
	require.Empty(t, evs, "rolled back with the transaction")

	_, err = bunboxtest.Events(ctx, nil)
	require.ErrorContains(t, err, "db is nil")
	_, err = bunboxtest.Outbox{Location: model.Location{Schema: "bad schema"}}.Events(ctx, db)
	require.ErrorContains(t, err, `"bad schema"`)
}

// TestOutboxWhere reads an outbox in a schema, under a prefix, with a codec, and a streamed row.
func TestOutboxWhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	schema := outboxtest.TenantSchema(t, db, "bunboxtest_")
	outboxtest.TenantTables(t, db, schema, "orders_")
	ring, err := model.NewKeyring("k1", map[string][]byte{"k1": make([]byte, 32)})
	require.NoError(t, err)
	codec, err := model.NewCodec(model.EncryptWith(ring))
	require.NoError(t, err)
	loc := model.Location{Schema: schema, TablePrefix: "orders_", Codec: codec} // the one value every part takes
	ob := bunx.New(db, bunx.WithLocation(loc))
	ev := newEvent(t, "order.placed")
	require.NoError(t, ob.Record(ctx, db, ev))
	var encoded int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM "`+schema+`".orders_outbox_events WHERE payload_encoded IS NOT NULL`).Scan(ctx, &encoded))
	require.Equal(t, 1, encoded, "the payload is encoded")

	where := bunboxtest.Outbox{Location: loc}
	evs, err := where.Events(ctx, db)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.JSONEq(t, `{"name":"order.placed"}`, string(evs[0].Payload), "decoded with the codec")
	evs, err = bunboxtest.Events(ctx, db)
	require.NoError(t, err)
	require.Empty(t, evs, "the default outbox is another table")

	var got []string
	n, err := where.Drain(ctx, db, asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		got = append(got, string(task.Payload()))
		return nil
	}))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.JSONEq(t, `{"name":"order.placed"}`, got[0], "the handler gets the decoded payload, as from the relay with Config.Location.Codec")
}

type orderPaid struct {
	Name string `json:"name"`
}

// TestDrain hands committed events to the worker's handlers, the inbox's among them, marks them
// delivered, drains the events the handlers record, and stops at a failing handler.
func TestDrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	ob := bunx.New(db)
	inbox := worker.NewInbox(db)
	placed := newEvent(t, "order.placed", model.WithMetadata("tenant", "a"), model.WithOrderingKey("o-1"))
	require.NoError(t, ob.Record(ctx, db, placed, newEvent(t, "order.paid")))

	var seen []*asynq.Task
	mux := asynq.NewServeMux()
	mux.HandleFunc("order.placed", func(ctx context.Context, task *asynq.Task) error {
		seen = append(seen, task)
		return ob.Record(ctx, db, newEvent(t, "email.sent")) // drained in a second round
	})
	mux.Handle("order.paid", worker.HandleJSON(inbox, "book", func(ctx context.Context, tx bun.Tx, p *orderPaid) error {
		require.Equal(t, "order.paid", p.Name)
		return nil
	}))
	mux.HandleFunc("email.sent", func(context.Context, *asynq.Task) error { return nil })

	n, err := bunboxtest.Drain(ctx, db, mux)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Len(t, seen, 1)
	task := seen[0]
	require.Equal(t, "order.placed", task.Type())
	require.JSONEq(t, `{"name":"order.placed"}`, string(task.Payload()))
	h := task.Headers()
	require.Equal(t, placed.EventID.String(), h[wire.HeaderEventID])
	require.Equal(t, "o-1", h[wire.HeaderOrderingKey])
	require.Equal(t, "a", h["tenant"])
	id, err := worker.TaskEventID(task)
	require.NoError(t, err)
	require.Equal(t, placed.EventID, id)
	require.Equal(t, int64(1), outboxtest.Count(t, db, "inbox_events", ""), "the inbox recorded the event")
	require.Zero(t, outboxtest.CountUndelivered(t, db, ""), "every event marked delivered")

	n, err = bunboxtest.Drain(ctx, db, mux)
	require.NoError(t, err)
	require.Zero(t, n, "nothing pending")

	// A failing handler, or none: Drain stops, names the event, and leaves it pending.
	refund := newEvent(t, "order.refunded")
	require.NoError(t, ob.Record(ctx, db, refund))
	n, err = bunboxtest.Drain(ctx, db, mux)
	require.ErrorContains(t, err, refund.EventID.String())
	require.ErrorContains(t, err, "handler not found")
	require.Zero(t, n)
	boom := errors.New("boom")
	n, err = bunboxtest.Drain(ctx, db, asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return boom }))
	require.ErrorIs(t, err, boom)
	require.Zero(t, n)
	require.Equal(t, int64(1), outboxtest.CountUndelivered(t, db, ""))
	_, err = bunboxtest.Drain(ctx, db, nil)
	require.ErrorContains(t, err, "handler is nil")
}

// TestStreamedRows reads and drains the rows of an outbox whose snapshot cursor is on: they wait with
// published_at 'infinity', which reads as not delivered.
func TestStreamedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	require.NoError(t, relay.EnableStream(ctx, db, model.Location{}))
	ev := newEvent(t, "order.placed")
	require.NoError(t, bunx.New(db).Record(ctx, db, ev))
	require.Equal(t, int64(1), outboxtest.Count(t, db, "outbox_events", "published_at = 'infinity'"), "the row is streamed")
	evs, err := bunboxtest.Events(ctx, db)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Nil(t, evs[0].PublishedAt)
	n, err := bunboxtest.Drain(ctx, db, asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	evs, err = bunboxtest.Events(ctx, db)
	require.NoError(t, err)
	require.NotNil(t, evs[0].PublishedAt)
}
