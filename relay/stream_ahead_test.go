package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// The tests of a stream round that covers several batches (readAhead). With 400 rows written before the
// relay starts, BatchSize 100 and a relay that has not measured a row yet, the first round reads the
// batches [0, 8) (the sizer's sample), [8, 108), [108, 208) and [208, 308), in one pair.

// terminateStreamRound terminates the backend of the stream round that holds the cursor row's lock, and
// returns how many it terminated (see TestStreamRoundKilledMidEnqueue).
func terminateStreamRound(t *testing.T, db *bun.DB) int64 {
	var k int64
	err := db.NewRaw(`SELECT count(pg_terminate_backend(pid)) FROM (SELECT DISTINCT l.pid FROM pg_locks l
WHERE l.relation = to_regclass('bunbox_stream') AND l.mode = 'RowShareLock' AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.pid <> pg_backend_pid()) AS holders`).Scan(context.Background(), &k)
	require.NoError(t, err)
	return k
}

// deliveredIDs returns the event ids of the streamed rows the cursor has passed.
func deliveredIDs(t *testing.T, db bun.IDB) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	require.NoError(t, db.NewRaw(`SELECT e.event_id FROM outbox_events e `+streamsql.Cursor+` WHERE `+
		streamsql.Delivered).Scan(context.Background(), &ids))
	return ids
}

// A round killed while it reads its third batch, the enqueues of the second in flight: nothing of the
// round is kept, and every row is still delivered, once in the queue.
func TestStreamAheadKilledWhileReading(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	oneSlice(t, b.db)
	events := b.record(t, b.db, 400)
	var once sync.Once
	var terminated atomic.Int64
	r := b.newRelay(t, Config{BatchSize: 100, Workers: 1, DisableReconciler: true})
	r.stream.reading = func(k int) {
		if k == 2 {
			once.Do(func() { terminated.Store(terminateStreamRound(t, b.db)) })
		}
	}
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
	require.GreaterOrEqual(t, again, 8, "the killed round's first batch, at least, enqueued again")
	require.LessOrEqual(t, again, 2*100+8, "no more than the batches the killed round had started")
}

// A relay stopped while its round reads its fourth batch (the enqueues of the third in flight): the round
// commits the first two batches and the third up to its first row not tried, and no further; the next
// relay delivers the rest, every row once in the queue.
func TestStreamAheadStoppedMidRound(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	oneSlice(t, b.db)
	events := b.record(t, b.db, 400)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := b.newRelay(t, Config{BatchSize: 100, Workers: 1, DisableReconciler: true})
	first.stream.reading = func(k int) {
		if k == 3 {
			cancel()
		}
	}
	require.NoError(t, first.Run(ctx))
	c := countStream(t, b.db)
	t.Logf("the stopped round moved the cursor past %d rows", c.Delivered)
	require.GreaterOrEqual(t, c.Delivered, int64(108), "the batches done before the stop committed")
	require.LessOrEqual(t, c.Delivered, int64(208), "nothing past the batch in flight at the stop")
	b.requirePassedEnqueuedOnce(t)
	b.deliverRestOnce(t, events)
}

// A relay stopped in the middle of the enqueues of its round's third batch: the cursor moves past the last
// row tried and no further, every row it passed enqueued once or handed to the per-row path untried.
func TestStreamAheadStoppedMidBatch(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	oneSlice(t, b.db)
	events := b.record(t, b.db, 400)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.enq.before = func(n int) {
		if n == 150 {
			cancel()
		}
	}
	first := b.newRelay(t, Config{BatchSize: 100, Workers: 1, DisableReconciler: true})
	require.NoError(t, first.Run(ctx))
	b.enq.before = nil
	c := countStream(t, b.db)
	t.Logf("the stopped round moved the cursor past %d rows", c.Delivered)
	require.LessOrEqual(t, c.Delivered, int64(308), "nothing past the batches the round had started")
	b.requirePassedEnqueuedOnce(t)
	var waiting []uuid.UUID
	require.NoError(t, b.db.NewRaw(`SELECT e.event_id FROM outbox_events e `+streamsql.Cursor+` WHERE `+
		streamsql.Waiting).Scan(context.Background(), &waiting))
	for _, id := range waiting {
		require.Zero(t, b.enq.count(id.String()), "a row past the cursor was enqueued: the cursor stopped before the last row tried")
	}
	b.deliverRestOnce(t, events)
}

// Failures, hand-overs and an outage in the later batches of a round: keyed rows and a task's own failures
// in the third batch are handed over (the latter charged) in the same commit as the batches before; the
// fourth batch, whose enqueues all meet an outage, ends the round before it: its rows stay in the stream,
// uncharged, and are delivered once after the outage.
func TestStreamAheadFailuresInLaterBatches(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	oneSlice(t, b.db)
	events := b.record(t, b.db, 120)
	var keyed []*model.Event
	for i := range 10 {
		keyed = append(keyed, b.record(t, b.db, 1, model.WithOrderingKey(fmt.Sprintf("key-%d", i)))...)
	}
	events = append(append(events, keyed...), b.record(t, b.db, 270)...)
	rejected, refused := map[string]bool{}, map[string]bool{}
	for _, ev := range events[150:155] {
		rejected[ev.EventID.String()] = true
	}
	for _, ev := range events[208:] {
		refused[ev.EventID.String()] = true
	}
	var outage atomic.Bool
	outage.Store(true)
	b.enq.setFail(func(id string) error {
		switch {
		case rejected[id]:
			return fmt.Errorf("%w: not this one", ErrTaskRejected)
		case refused[id] && outage.Load():
			return errors.New("LOADING Redis is loading the dataset in memory")
		}
		return nil
	})
	r := b.newRelay(t, Config{BatchSize: 100, Workers: 1, DisableReconciler: true, MaxAttempts: 2,
		RetryBackoff: 10 * time.Millisecond, RetryBackoffMax: 20 * time.Millisecond})
	run(t, r)
	outboxtest.WaitFor(t, streamWait, "rounds failing", func() bool {
		return len(b.logs.matching("bunbox relay round failed, backing off")) >= 2
	})
	c := countStream(t, b.db)
	require.EqualValues(t, 400-208, c.Waiting, "the outage's batch and those after it wait in the stream")
	require.EqualValues(t, 208-15, c.Delivered)
	require.EqualValues(t, 15, c.Classic, "the keyed and the rejected rows handed over, no other")
	require.EqualValues(t, 5, outboxtest.Count(t, b.db, "outbox_events", "attempts > 0"),
		"the rejected rows charged, nothing for the outage")

	outage.Store(false)
	kept := append(append([]*model.Event{}, events[:150]...), events[155:]...)
	b.waitQueued(t, len(kept))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(400-15)
	})
	outboxtest.WaitFor(t, streamWait, "the rejected rows dead", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "dead_at IS NOT NULL AND attempts = 2") == 5
	})
	requireDeliveredOnce(t, b.inspector, b.queue, kept)
	b.requireEnqueuedOnce(t, events[:150])
	b.requireEnqueuedOnce(t, events[155:208])
	require.Zero(t, outboxtest.Count(t, b.db, "outbox_events", "attempts > 0 AND dead_at IS NULL"), "no charge")
}

// The rows of a transaction that was open when the pair began (in from's xip list) and committed before
// it closed, read over several batches of one round beside rows written after it: every row once.
func TestStreamAheadRowsOfATransactionOpenAtThePairsStart(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	oneSlice(t, b.db)
	r := b.newRelay(t, Config{BatchSize: 40, Workers: 1, DisableReconciler: true})
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	held := b.record(t, tx, 130)
	stop := run(t, r)
	others := b.record(t, b.db, 60)
	b.waitQueued(t, len(others))
	outboxtest.WaitFor(t, streamWait, "the cursor past the others", func() bool {
		return countStream(t, b.db).Delivered == int64(len(others))
	})
	// The pair that delivered the others began while tx was open: tx is in its from's xip list now.
	stop()
	require.NoError(t, tx.Commit())
	after := b.record(t, b.db, 90)
	all := append(append(others, held...), after...)
	var reads atomic.Int64
	r2 := b.newRelay(t, Config{BatchSize: 40, Workers: 1, DisableReconciler: true})
	r2.stream.reading = func(int) { reads.Add(1) }
	run(t, r2)
	b.waitQueued(t, len(all))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(all))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, all)
	b.requireEnqueuedOnce(t, all)
	require.Positive(t, reads.Load(), "rounds read ahead")
	require.Zero(t, countStream(t, b.db).Updated)
}

// deliverRestOnce runs a relay that delivers what an earlier one left, and requires every one of events
// in the queue once: passed by the cursor, or handed to the per-row path by a stop (the rows it released
// before a row that reached Redis) and published there.
func (b *streamBundle) deliverRestOnce(t *testing.T, events []*model.Event) {
	t.Helper()
	run(t, b.newRelay(t, Config{BatchSize: 100, DisableReconciler: true}))
	b.waitQueued(t, len(events))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row, the handed-over ones published", func() bool {
		c := countStream(t, b.db)
		return c.Delivered+c.Classic == int64(len(events)) &&
			outboxtest.Count(t, b.db, "outbox_events", "published_at IS NULL") == 0
	})
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	b.requireEnqueuedOnce(t, events)
}

// requirePassedEnqueuedOnce requires each row the cursor has passed enqueued once, no more, no less.
func (b *streamBundle) requirePassedEnqueuedOnce(t *testing.T) {
	t.Helper()
	for _, id := range deliveredIDs(t, b.db) {
		require.Equal(t, 1, b.enq.count(id.String()), "a row the cursor passed was enqueued")
	}
}
