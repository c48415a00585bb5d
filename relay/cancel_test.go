package relay

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// cancelOutcome is the cancel state of a row.
type cancelOutcome struct {
	Settled bool   `bun:"settled"`
	Result  string `bun:"result"`
}

func readCancelOutcome(t *testing.T, db bun.IDB, id uuid.UUID) cancelOutcome {
	t.Helper()
	var o cancelOutcome
	require.NoError(t, db.NewRaw(`SELECT cancel_settled_at IS NOT NULL AS settled, coalesce(cancel_result, '') AS result
FROM outbox_events WHERE event_id = ?`, id).Scan(context.Background(), &o))
	return o
}

// waitCancelSettled waits until the relay settled the cancel of id, and returns its outcome.
func waitCancelSettled(t *testing.T, db bun.IDB, id uuid.UUID) string {
	t.Helper()
	var o cancelOutcome
	outboxtest.WaitFor(t, 30*time.Second, "the cancel settled", func() bool {
		o = readCancelOutcome(t, db, id)
		return o.Settled
	})
	return o.Result
}

// recordOne commits one event of the bundle's queue.
func (b *testBundle) recordOne(t *testing.T, ob *bunx.Outbox, opts ...model.Option) *model.Event {
	t.Helper()
	ev, err := model.NewEvent("cart.remind", map[string]string{"cart": "c1"}, append([]model.Option{model.WithQueue(b.queue)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, ob.Record(context.Background(), b.db, ev))
	return ev
}

// cancelInTx cancels ids in a transaction that commits.
func cancelInTx(t *testing.T, db *bun.DB, ob *bunx.Outbox, ids ...uuid.UUID) {
	t.Helper()
	require.NoError(t, db.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
		return ob.Cancel(ctx, tx, ids...)
	}))
}

// waitTaskState waits until asynq holds the task id in the bundle's queue in state.
func (b *testBundle) waitTaskState(t *testing.T, id string, state asynq.TaskState) {
	t.Helper()
	outboxtest.WaitFor(t, 30*time.Second, "task "+id+" "+state.String(), func() bool {
		info, err := b.inspector.GetTaskInfo(b.queue, id)
		return err == nil && info.State == state
	})
}

func (b *testBundle) requireTaskGone(t *testing.T, id string) {
	t.Helper()
	_, err := b.inspector.GetTaskInfo(b.queue, id)
	require.ErrorIs(t, err, asynq.ErrTaskNotFound, "task %s", id)
}

// startCancelWorker runs an asynq server on the bundle's queue whose retries wait retryDelay.
func (b *testBundle) startCancelWorker(t *testing.T, retryDelay time.Duration, h asynq.HandlerFunc) {
	t.Helper()
	srv := asynq.NewServer(b.redis, asynq.Config{
		Queues:            map[string]int{b.queue: 1},
		Concurrency:       2,
		TaskCheckInterval: 5 * time.Millisecond,
		RetryDelayFunc:    func(int, error, *asynq.Task) time.Duration { return retryDelay },
		Logger:            quietAsynqLogger{},
		LogLevel:          asynq.FatalLevel,
	})
	require.NoError(t, srv.Start(h))
	t.Cleanup(srv.Shutdown)
}

func TestCancelBeforePublishIsNeverDelivered(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setup(t)
	ob := bunx.New(b.db)
	cancelled := b.recordOne(t, ob)
	kept := b.recordOne(t, ob)
	cancelInTx(t, b.db, ob, cancelled.EventID)

	run(t, b.newRelay(t, Config{}))
	outboxtest.WaitFor(t, 30*time.Second, "the event behind it published, the cancel settled", func() bool {
		// The two rows may be in different lanes: each is passed by its lane's rounds.
		return outboxtest.CountDelivered(t, b.db, "event_id = ?", kept.EventID) == 1 &&
			readCancelOutcome(t, b.db, cancelled.EventID).Settled
	})
	require.Zero(t, b.enq.count(cancelled.EventID.String()), "the cancelled event was never enqueued")
	require.Zero(t, outboxtest.Count(t, b.db, "outbox_events", "event_id = ? AND published_at IS NOT NULL AND published_at <> 'infinity'", cancelled.EventID),
		"never marked published")
	require.Equal(t, cancelOutcome{Settled: true, Result: cancelNeverPublished}, readCancelOutcome(t, b.db, cancelled.EventID))
	b.requireTaskGone(t, cancelled.EventID.String())
}

func TestCancelRolledBackIsDelivered(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setup(t)
	ob := bunx.New(b.db)
	ev := b.recordOne(t, ob)
	boom := errors.New("changed my mind")
	require.ErrorIs(t, b.db.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
		require.NoError(t, ob.Cancel(ctx, tx, ev.EventID))
		return boom
	}), boom)

	run(t, b.newRelay(t, Config{}))
	b.waitTaskState(t, ev.EventID.String(), asynq.TaskStatePending)
	require.Equal(t, cancelOutcome{}, readCancelOutcome(t, b.db, ev.EventID))
}

// TestCancelTakesTasksBackOutOfAsynq cancels published events whose tasks wait in asynq: scheduled,
// pending (no worker runs) and retry. The relay deletes each from asynq.
func TestCancelTakesTasksBackOutOfAsynq(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)

	t.Run("Scheduled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ob := bunx.New(b.db)
		ev := b.recordOne(t, ob, model.WithProcessIn(24*time.Hour))
		run(t, b.newRelay(t, Config{}))
		b.waitTaskState(t, ev.EventID.String(), asynq.TaskStateScheduled)

		cancelInTx(t, b.db, ob, ev.EventID)
		require.Equal(t, cancelRemoved, waitCancelSettled(t, b.db, ev.EventID))
		b.requireTaskGone(t, ev.EventID.String())
		outboxtest.WaitFor(t, 10*time.Second, "the log line", func() bool { // logged after the outcome commits
			return len(b.logs.matching("cancelled event: "+cancelRemoved)) >= 1
		})
		require.Len(t, b.logs.matching("cancelled event: "+cancelRemoved), 1)
	})

	t.Run("Pending", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ob := bunx.New(b.db)
		ev := b.recordOne(t, ob)
		run(t, b.newRelay(t, Config{}))
		b.waitTaskState(t, ev.EventID.String(), asynq.TaskStatePending)

		cancelInTx(t, b.db, ob, ev.EventID)
		require.Equal(t, cancelRemoved, waitCancelSettled(t, b.db, ev.EventID))
		b.requireTaskGone(t, ev.EventID.String())
	})

	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ob := bunx.New(b.db)
		ev := b.recordOne(t, ob)
		b.startCancelWorker(t, time.Hour, func(context.Context, *asynq.Task) error { return errors.New("not yet") })
		run(t, b.newRelay(t, Config{}))
		b.waitTaskState(t, ev.EventID.String(), asynq.TaskStateRetry)

		cancelInTx(t, b.db, ob, ev.EventID)
		require.Equal(t, cancelRemoved, waitCancelSettled(t, b.db, ev.EventID))
		b.requireTaskGone(t, ev.EventID.String())
	})

	t.Run("GoneFromRedis", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ob := bunx.New(b.db)
		ev := b.recordOne(t, ob)
		// No reconciler: it would rightly deliver the lost task again before the cancel commits.
		run(t, b.newRelay(t, Config{DisableReconciler: true}))
		b.waitTaskState(t, ev.EventID.String(), asynq.TaskStatePending)
		require.NoError(t, b.inspector.DeleteTask(b.queue, ev.EventID.String())) // Redis lost it

		cancelInTx(t, b.db, ob, ev.EventID)
		require.Equal(t, cancelGone, waitCancelSettled(t, b.db, ev.EventID))
		require.Equal(t, 1, b.enq.count(ev.EventID.String()), "not enqueued again")
	})

	t.Run("FanOutListeners", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ob := bunx.New(b.db)
		ev := b.recordOne(t, ob, model.WithProcessIn(24*time.Hour))
		run(t, b.newRelay(t, Config{Routes: fanout.Routes{"cart.remind": {"mailer", "audit"}}}))
		for _, l := range []string{"mailer", "audit"} {
			b.waitTaskState(t, ev.EventID.String()+":"+l, asynq.TaskStateScheduled)
		}

		cancelInTx(t, b.db, ob, ev.EventID)
		require.Equal(t, cancelRemoved, waitCancelSettled(t, b.db, ev.EventID))
		for _, l := range []string{"mailer", "audit"} {
			b.requireTaskGone(t, ev.EventID.String()+":"+l)
		}
	})
}

// TestCancelCannotTakeBackWhatRan cancels events whose tasks completed, or are running: the relay says
// it could not take them back (a Warn log line, the row's cancel_result), and follows a running one
// until it is done.
func TestCancelCannotTakeBackWhatRan(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setup(t)
	ob := bunx.New(b.db)
	done := b.recordOne(t, ob)
	running := b.recordOne(t, ob, model.WithMetadata("block", "yes"))
	release := make(chan struct{})
	b.startCancelWorker(t, time.Hour, func(ctx context.Context, task *asynq.Task) error {
		if id, _ := asynq.GetTaskID(ctx); id == running.EventID.String() {
			<-release
		}
		return nil
	})
	run(t, b.newRelay(t, Config{}))
	b.waitTaskState(t, done.EventID.String(), asynq.TaskStateCompleted)
	b.waitTaskState(t, running.EventID.String(), asynq.TaskStateActive)

	cancelInTx(t, b.db, ob, done.EventID, running.EventID)
	require.Equal(t, cancelRan, waitCancelSettled(t, b.db, done.EventID))
	outboxtest.WaitFor(t, 30*time.Second, "the running task seen", func() bool {
		return readCancelOutcome(t, b.db, running.EventID) == cancelOutcome{Result: cancelRunning}
	})
	close(release)
	require.Equal(t, cancelRan, waitCancelSettled(t, b.db, running.EventID))

	// The line is logged after the row's outcome commits: wait for it rather than race it.
	outboxtest.WaitFor(t, 10*time.Second, "a log line per event", func() bool {
		return len(b.logs.matching("cancelled event: "+cancelRan)) >= 2
	})
	ran := b.logs.matching("cancelled event: " + cancelRan)
	require.Len(t, ran, 2, "one line per event")
	for _, r := range ran {
		require.Equal(t, slog.LevelWarn, r.Level)
	}
	require.Len(t, b.logs.matching("cancelled event: "+cancelRunning), 1, "said once, however many looks")
}

// TestCancelKeyedReleasesTheKey: a cancelled keyed event does not hold its key, whether it was cancelled
// before it was published or while its task waited in asynq.
func TestCancelKeyedReleasesTheKey(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)

	t.Run("BeforePublish", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ob := bunx.New(b.db)
		head := b.recordOne(t, ob, model.WithOrderingKey("k"))
		next := b.recordOne(t, ob, model.WithOrderingKey("k"))
		cancelInTx(t, b.db, ob, head.EventID)
		run(t, b.newRelay(t, Config{}))
		b.waitTaskState(t, next.EventID.String(), asynq.TaskStatePending)
		require.Zero(t, b.enq.count(head.EventID.String()))
	})

	t.Run("WhileScheduled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ob := bunx.New(b.db)
		head := b.recordOne(t, ob, model.WithOrderingKey("k"), model.WithProcessIn(24*time.Hour))
		next := b.recordOne(t, ob, model.WithOrderingKey("k"))
		run(t, b.newRelay(t, Config{}))
		b.waitTaskState(t, head.EventID.String(), asynq.TaskStateScheduled)
		require.Zero(t, b.enq.count(next.EventID.String()), "held behind its head")

		cancelInTx(t, b.db, ob, head.EventID)
		require.Equal(t, cancelRemoved, waitCancelSettled(t, b.db, head.EventID))
		b.waitTaskState(t, next.EventID.String(), asynq.TaskStatePending)
		b.requireTaskGone(t, head.EventID.String())
	})
}

// TestCancelledRowsCleanedUp: settled cancelled rows are deleted PublishedRetention after their cancel.
func TestCancelledRowsCleanedUp(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setup(t)
	ob := bunx.New(b.db)
	old := b.recordOne(t, ob)
	fresh := b.recordOne(t, ob)
	cancelInTx(t, b.db, ob, old.EventID, fresh.EventID)
	_, err := b.db.NewRaw("UPDATE outbox_events SET cancelled_at = now() - interval '8 days' WHERE event_id = ?", old.EventID).
		Exec(context.Background())
	require.NoError(t, err)
	r := b.newRelay(t, Config{})
	// A streamed row's cancel is settled by the stream round that passes it; cleanup deletes settled ones.
	require.NoError(t, r.rounds.runAll(context.Background()).Err)
	n, err := r.cleaner.CancelledOnce(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Zero(t, outboxtest.Count(t, b.db, "outbox_events", "event_id = ?", old.EventID))
	require.EqualValues(t, 1, outboxtest.Count(t, b.db, "outbox_events", "event_id = ?", fresh.EventID))
}
