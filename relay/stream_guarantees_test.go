package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// (e) A task's own failure hands the row to the per-row path, charged: retried, then dead after
// MaxAttempts. An outage hands nothing over and charges nothing: the rows are delivered once after it.
func TestStreamFailuresAreHandedOver(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	events := b.record(t, b.db, 60)
	rejected := map[string]bool{}
	for _, ev := range events[:5] {
		rejected[ev.EventID.String()] = true
	}
	b.enq.setFail(func(id string) error {
		if rejected[id] {
			return fmt.Errorf("%w: not this one", ErrTaskRejected)
		}
		return nil
	})
	var dead atomic.Int64
	r := b.newRelay(t, Config{MaxAttempts: 3, RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 20 * time.Millisecond,
		Observer: Observer{OnDead: func(context.Context, DeadEvent) { dead.Add(1) }}})
	run(t, r)
	b.waitQueued(t, len(events)-5)
	outboxtest.WaitFor(t, streamWait, "the rejected rows dead", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "dead_at IS NOT NULL AND attempts = 3 AND published_at IS NULL AND last_error LIKE '%not this one%'") == 5
	})
	outboxtest.WaitFor(t, streamWait, "OnDead for each (called after the commit)", func() bool { return dead.Load() == 5 })
	for _, ev := range events[:5] {
		require.Equal(t, 3, b.enq.count(ev.EventID.String()), "attempts of a rejected row")
	}
	requireDeliveredOnce(t, b.inspector, b.queue, events[5:])
	b.requireEnqueuedOnce(t, events[5:])
	require.EqualValues(t, len(events)-5, countStream(t, b.db).Delivered)

	// An outage of every enqueue: nothing is handed over, nothing charged; the round backs off.
	var outage atomic.Bool
	outage.Store(true)
	b.enq.setFail(func(string) error {
		if outage.Load() {
			return errors.New("LOADING Redis is loading the dataset in memory")
		}
		return nil
	})
	more := b.record(t, b.db, 30)
	outboxtest.WaitFor(t, streamWait, "rounds failing", func() bool {
		return len(b.logs.matching("bunbox relay round failed, backing off")) >= 2
	})
	c := countStream(t, b.db)
	require.EqualValues(t, len(more), c.Waiting, "the rows wait in the stream")
	outage.Store(false)
	b.waitQueued(t, len(events)-5+len(more))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events)-5+len(more))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, append(events[5:len(events):len(events)], more...))
	require.Zero(t, outboxtest.Count(t, b.db, "outbox_events", "attempts > 0 AND dead_at IS NULL"), "no charge")

	// An outage of some enqueues while others reach Redis: those rows are handed over uncharged, and
	// the per-row path delivers them once Redis takes them.
	part := b.record(t, b.db, 40)
	refused := map[string]bool{}
	for _, ev := range part[10:20] {
		refused[ev.EventID.String()] = true
	}
	var partial atomic.Bool
	partial.Store(true)
	b.enq.setFail(func(id string) error {
		if partial.Load() && refused[id] {
			return errors.New("CLUSTERDOWN The cluster is down")
		}
		return nil
	})
	outboxtest.WaitFor(t, streamWait, "the refused rows handed over", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "published_at IS NULL AND attempts = 0 AND dead_at IS NULL") == 10
	})
	partial.Store(false)
	all := append(append(events[5:len(events):len(events)], more...), part...)
	b.waitQueued(t, len(all))
	outboxtest.WaitFor(t, streamWait, "the handed-over rows published", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "published_at IS NULL") == 5 // the dead ones
	})
	requireDeliveredOnce(t, b.inspector, b.queue, all)
	require.Zero(t, outboxtest.Count(t, b.db, "outbox_events", "attempts > 0 AND dead_at IS NULL"), "no charge")
}

// (f) Keyed rows go through the hand-over to the keyed per-row path: each key in its order.
func TestStreamKeyedRowsInKeyOrder(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	const keys, perKey = 4, 15
	rec := newSequenceRecorder()
	b.startWorker(t, 8, recordingHandler(rec, nil))
	for range 2 {
		run(t, b.newRelay(t, Config{BatchSize: 7, Workers: 2}))
	}
	var unkeyed []*model.Event
	for n := range perKey {
		var events []*model.Event
		for k := range keys {
			key := fmt.Sprintf("account-%d", k)
			ev, err := model.NewEvent("account.changed", keyedPayload{Key: key, Seq: n}, model.WithQueue(b.queue),
				model.WithOrderingKey(key))
			require.NoError(t, err)
			events = append(events, ev)
		}
		ev, err := model.NewEvent("account.changed", keyedPayload{Seq: n}, model.WithQueue(b.queue))
		require.NoError(t, err)
		unkeyed = append(unkeyed, ev)
		require.NoError(t, b.ob.Record(context.Background(), b.db, append(events, ev)...))
	}
	want := map[string]int{}
	for k := range keys {
		want[fmt.Sprintf("account-%d", k)] = perKey
	}
	outboxtest.WaitFor(t, streamWait, "every keyed event completed", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "ordering_key IS NOT NULL AND completed_at IS NULL") == 0
	})
	rec.requireInOrder(t, want)
	outboxtest.WaitFor(t, streamWait, "the unkeyed rows delivered by the stream", func() bool {
		return countStream(t, b.db).Delivered == int64(len(unkeyed))
	})
	require.EqualValues(t, keys*perKey, outboxtest.Count(t, b.db, "outbox_events",
		"ordering_key IS NOT NULL AND published_at IS NOT NULL AND published_at <> 'infinity'"), "keyed rows handed over")
	b.requireEnqueuedOnce(t, unkeyed)
}

// A keyed row the stream handed over is its key's head: a later row of its key still waiting in the
// stream (published_at 'infinity', never enqueued) must not hold it back as if its task were in asynq.
// Another relay's stream round holds the cursor here, so the later row waits for the whole test.
func TestStreamWaitingRowDoesNotHoldItsKey(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	head := b.record(t, b.db, 1, model.WithOrderingKey("account-1"))[0]
	var headID int64
	require.NoError(t, b.db.NewRaw(`SELECT id FROM outbox_events WHERE event_id = ?`, head.EventID).Scan(ctx, &headID))
	require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return store.NewMarks(tables.Default(), nil).HandedOver(ctx, tx, []int64{headID}) // as a stream round hands it over
	}))
	next := b.record(t, b.db, 1, model.WithOrderingKey("account-1"))[0]

	other, err := b.db.BeginTx(ctx, nil) // another relay's stream round, holding the cursor
	require.NoError(t, err)
	defer func() { _ = other.Rollback() }()
	_, err = other.ExecContext(ctx, `SELECT 1 FROM bunbox_stream WHERE name = 'outbox' FOR UPDATE`)
	require.NoError(t, err)

	run(t, b.newRelay(t, Config{Workers: 1, DisableReconciler: true}))
	outboxtest.WaitFor(t, streamWait, "the handed-over head published", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events",
			fmt.Sprintf("event_id = '%s' AND published_at IS NOT NULL", head.EventID)) == 1
	})
	require.EqualValues(t, 1, outboxtest.Count(t, b.db, "outbox_events",
		fmt.Sprintf("event_id = '%s' AND published_at = %s", next.EventID, streamsql.Sentinel)), "the next row still waits in the stream")
	require.NoError(t, other.Rollback())
}

// (g) A stream round that dies in the middle of its enqueues, its backend terminated, or its relay
// stopped: every row is still delivered, once in the queue (a second enqueue meets its TaskID).
func TestStreamRoundKilledMidEnqueue(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	events := b.record(t, b.db, 400)
	var once sync.Once
	var terminated atomic.Int64
	b.enq.before = func(n int) {
		if n != 150 {
			return
		}
		once.Do(func() { terminated.Store(terminateStreamRound(t, b.db)) })
	}
	r := b.newRelay(t, Config{BatchSize: 100, Workers: 1, DisableReconciler: true})
	run(t, r)
	b.waitQueued(t, len(events))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events))
	})
	require.EqualValues(t, 1, terminated.Load(), "a round's backend terminated")
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	require.Zero(t, countStream(t, b.db).Classic)
	again := 0
	for _, ev := range events {
		if b.enq.count(ev.EventID.String()) > 1 {
			again++
		}
	}
	t.Logf("%d rows enqueued again after the terminated round", again)
	require.Positive(t, again)
}

// (g) The same with the relay stopped in the middle of a round: the next relay delivers the rest.
func TestStreamRelayStoppedMidEnqueue(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	events := b.record(t, b.db, 400)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.enq.before = func(n int) {
		if n == 150 {
			cancel() // the relay stops in the middle of its second round
		}
	}
	first := b.newRelay(t, Config{BatchSize: 100, Workers: 1, DisableReconciler: true})
	require.NoError(t, first.Run(ctx))
	b.enq.before = nil
	require.Less(t, countStream(t, b.db).Delivered, int64(len(events)), "the first relay stopped before the end")
	b.deliverRestOnce(t, events)
}

// A relay that cannot track keyed events says so at start when the keyed rows wait in the stream, as it
// does for pending ones (TestOrderingWithoutInspectorKeyedRowsWait): the stream hands them to the per-row
// path, where they would wait unsaid.
func TestStreamWarnsKeyedWithoutInspector(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	b.record(t, b.db, 1, model.WithOrderingKey("account-1"))
	r, err := New(b.db, nil, Config{Enqueuer: b.enq, Logger: b.logs.logger(), DisableReconciler: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	run(t, r)
	outboxtest.WaitFor(t, streamWait, "the warning", func() bool {
		return len(b.logs.matching("keyed events are waiting, but this relay relays none")) > 0
	})
}
