package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// TestOrderingLateLowerIDWaitsForTheKeyInFlight: a transaction takes a keyed row's id, and commits after
// a later transaction's row of the same key was relayed and sits in asynq (pending, no worker yet). The
// late row, though its id is lower, waits until the key's task completed: the two never run at once, and
// they run in commit order.
func TestOrderingLateLowerIDWaitsForTheKeyInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := b.newRelay(t, Config{})

	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	late := insertKeyed(t, tx, b.queue, "account.changed", []keyedPayload{{"k", 1}})[0]
	early := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"k", 0}})[0]
	require.Less(t, late.ID, early.ID, "the late row has the lower id")

	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Published, "the committed row of the key")
	require.NoError(t, tx.Commit())

	res = r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Zero(t, res.Published, "the late row waits while its key's task is in asynq")
	require.Zero(t, b.enq.count(late.EventID.String()))
	require.False(t, r.rounds.rows.dueKeyed(ctx, r.db), "nothing keyed is due: the idle check stays cheap")

	rec := newSequenceRecorder()
	b.startWorker(t, 4, recordingHandler(rec, nil))
	run(t, r)
	outboxtest.WaitFor(t, 30*time.Second, "both handled", func() bool { return rec.completed("k") == 2 })
	rec.requireInOrder(t, map[string]int{"k": 2}) // commit order, never two at once
	require.Equal(t, 1, b.enq.count(late.EventID.String()))
	require.Equal(t, 1, b.enq.count(early.EventID.String()))
}

// TestOrderingLateLowerIDWhileARoundHoldsTheKey: the same, but the late row commits while the round that
// claimed the key's other row is still enqueueing it (not yet marked). A second round meanwhile claims
// the late row, the key's head now, and must not enqueue it.
func TestOrderingLateLowerIDWhileARoundHoldsTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := b.newRelay(t, Config{})

	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	late := insertKeyed(t, tx, b.queue, "account.changed", []keyedPayload{{"k", 1}})[0]
	early := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"k", 0}})[0]

	var started atomic.Bool
	var second BatchEvent
	b.enq.before = func(int) {
		if started.CompareAndSwap(false, true) { // in the first round, as it enqueues early
			require.NoError(t, tx.Commit())
			second = r.rounds.runAll(ctx)
		}
	}
	first := r.rounds.runAll(ctx)
	require.NoError(t, first.Err)
	require.Equal(t, 1, first.Published)
	require.Equal(t, 1, b.enq.count(early.EventID.String()))
	require.NoError(t, second.Err)
	require.Zero(t, second.Published, "the late row waited for the round that held its key")
	require.Zero(t, b.enq.count(late.EventID.String()))

	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Zero(t, res.Published, "and waits while the key's task is in asynq")
	require.Zero(t, b.enq.count(late.EventID.String()))
}
