package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// streamWait is how long the stream tests wait for a condition: the machine is shared.
const streamWait = 60 * time.Second

// streamBundle is a testBundle with an outbox to record events with.
type streamBundle struct {
	*testBundle
	ob *bunx.Outbox
}

// setupStream is setup with the stream on.
func setupStream(t *testing.T) *streamBundle {
	t.Helper()
	b := &streamBundle{testBundle: setup(t)}
	b.ob = bunx.New(b.db) // before any relay runs: New adds the outbox's hooks to the db
	require.NoError(t, EnableStream(context.Background(), b.db, model.Location{}))
	return b
}

// recordEvents records n events into queue with bunx (the test helpers' insertEvents reads published_at
// back, which cannot parse 'infinity'), with opts given to each event.
func recordEvents(t testing.TB, ob *bunx.Outbox, db bun.IDB, queue string, n int, opts ...model.Option) []*model.Event {
	t.Helper()
	events := make([]*model.Event, 0, n)
	for i := range n {
		ev, err := model.NewEvent("test.event", map[string]int{"n": i},
			append([]model.Option{model.WithQueue(queue), model.WithMetadata("k", "v")}, opts...)...)
		require.NoError(t, err)
		events = append(events, ev)
	}
	for chunk := range chunks(events, 1000) {
		require.NoError(t, ob.Record(context.Background(), db, chunk...))
	}
	return events
}

// record records n events into b's queue with bunx.
func (b *streamBundle) record(t testing.TB, db bun.IDB, n int, opts ...model.Option) []*model.Event {
	t.Helper()
	return recordEvents(t, b.ob, db, b.queue, n, opts...)
}

// streamCounts are the streamed rows of an outbox by state, and the rows the stream handed over.
type streamCounts struct {
	Delivered, Waiting, Classic int64
	Updated                     int64 // streamed rows whose tuple is not the one their transaction wrote
}

func countStream(t testing.TB, db bun.IDB) streamCounts {
	t.Helper()
	var c streamCounts
	err := db.NewRaw(`SELECT count(*) FILTER (WHERE `+streamsql.Delivered+`),
  count(*) FILTER (WHERE `+streamsql.Waiting+`),
  count(*) FILTER (WHERE e.published_at IS DISTINCT FROM 'infinity'),
  count(*) FILTER (WHERE e.published_at = 'infinity' AND e.xmin::text::bigint <> e.xid::text::bigint % 4294967296)
FROM outbox_events e `+streamsql.Cursor).Scan(context.Background(), &c.Delivered, &c.Waiting, &c.Classic, &c.Updated)
	require.NoError(t, err)
	return c
}

// waitQueued waits until queue holds n tasks.
func (b *testBundle) waitQueued(t *testing.T, n int) {
	t.Helper()
	outboxtest.WaitFor(t, streamWait, "tasks in the queue", func() bool {
		info, err := b.inspector.GetQueueInfo(b.queue)
		return err == nil && info.Size >= n
	})
}

// requireEnqueuedOnce checks that every event was enqueued exactly once by the relay's client.
func (b *testBundle) requireEnqueuedOnce(t *testing.T, events []*model.Event) {
	t.Helper()
	for _, ev := range events {
		require.Equal(t, 1, b.enq.count(ev.EventID.String()), "enqueues of event %s", ev.EventID)
	}
}

// (a) Every streamed row is delivered once, and never updated.
func TestStreamDeliversEveryRowOnceWithoutUpdate(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	events := b.record(t, b.db, 1234)
	r := b.newRelay(t, Config{BatchSize: 100})
	run(t, r)
	b.waitQueued(t, len(events))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events))
	})
	more := b.record(t, b.db, 50) // after a quiet spell, with the relay idle
	events = append(events, more...)
	b.waitQueued(t, len(events))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	b.requireEnqueuedOnce(t, events)
	c := countStream(t, b.db)
	require.Equal(t, streamCounts{Delivered: int64(len(events))}, c, "no row updated, none handed over")
	require.EqualValues(t, 0, published(t, b.db)-int64(len(events)), "every row still in the stream")
	require.Equal(t, int64(len(events)), r.Stats().Published)
}

// (b) The rows of a transaction that rolls back are never delivered.
func TestStreamSkipsRolledBackRows(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	r := b.newRelay(t, Config{})
	run(t, r)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	lost := b.record(t, tx, 20)
	kept := b.record(t, b.db, 30)
	require.NoError(t, tx.Rollback())
	kept = append(kept, b.record(t, b.db, 30)...)
	b.waitQueued(t, len(kept))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		c := countStream(t, b.db)
		return c.Delivered == int64(len(kept)) && c.Waiting == 0
	})
	requireDeliveredOnce(t, b.inspector, b.queue, kept)
	for _, ev := range lost {
		require.Zero(t, b.enq.count(ev.EventID.String()))
	}
}

// (c) A transaction held open while others commit holds nothing back: the others are delivered
// meanwhile, and its rows once after it commits.
func TestStreamLongTransactionDoesNotStall(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	r := b.newRelay(t, Config{BatchSize: 50})
	run(t, r)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	held := b.record(t, tx, 40)
	var others []*model.Event
	for range 5 {
		others = append(others, b.record(t, b.db, 60)...)
		b.waitQueued(t, len(others))
	}
	outboxtest.WaitFor(t, streamWait, "the cursor past the others", func() bool {
		return countStream(t, b.db).Delivered == int64(len(others))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, others)
	require.NoError(t, tx.Commit())
	all := append(others, held...)
	b.waitQueued(t, len(all))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(all))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, all)
	b.requireEnqueuedOnce(t, all)
	require.Zero(t, countStream(t, b.db).Updated)
}

// The wake-up drives stream rounds as it drives per-row rounds: an idle relay whose poll waits a minute
// delivers a streamed row committed after a quiet spell, and one whose transaction committed late.
func TestStreamWakeUp(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	r := b.newRelay(t, quietConfig())
	run(t, r)
	var events []*model.Event
	for range 3 {
		waitIdle(t, r, 40)
		events = append(events, b.record(t, b.db, 1)...)
		outboxtest.WaitFor(t, 30*time.Second, "the streamed event after a quiet spell relayed", func() bool {
			return countStream(t, b.db).Delivered == int64(len(events))
		})
	}
	waitIdle(t, r, 10)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	events = append(events, b.record(t, tx, 1)...)
	waitIdle(t, r, 3) // the move seen, and a round woken that found nothing
	require.NoError(t, tx.Commit())
	outboxtest.WaitFor(t, 30*time.Second, "the streamed event relayed after its late commit", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, events)
}

// oneSlice writes every new row of db's outbox into slice 0 (stream_slice's default), so that the stream
// has one lane per queue: for the tests of a round's batches, which count rows in one lane's order.
func oneSlice(t testing.TB, db bun.IDB) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), `ALTER TABLE outbox_events ALTER COLUMN stream_slice SET DEFAULT 0`)
	require.NoError(t, err)
}
