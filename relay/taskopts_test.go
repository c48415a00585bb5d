package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// newEvent builds an event into queue with opts, and commits it.
func (b *testBundle) newEvent(t *testing.T, name string, opts ...model.Option) *model.Event {
	t.Helper()
	ev, err := model.NewEvent(name, map[string]string{"name": name}, append([]model.Option{model.WithQueue(b.queue)}, opts...)...)
	require.NoError(t, err)
	_, err = b.db.NewInsert().Model(ev).Exec(context.Background())
	require.NoError(t, err)
	return ev
}

func (b *testBundle) taskInfo(t *testing.T, id string) *asynq.TaskInfo {
	t.Helper()
	ti, err := b.inspector.GetTaskInfo(b.queue, id)
	require.NoError(t, err, "task %s", id)
	return ti
}

// Each delivery option of the row is on the task, as asynq's Inspector reports it, and the relay
// enqueues every event at once, whatever its schedule.
func TestDeliveryOptionsOnTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	at, deadline := now.Add(time.Hour), now.Add(2*time.Hour)

	scheduled := b.newEvent(t, "opts.scheduled", model.WithProcessAt(at), model.WithMaxRetry(3),
		model.WithTimeout(30*time.Second), model.WithDeadline(deadline), model.WithTaskRetention(48*time.Hour))
	in := b.newEvent(t, "opts.in", model.WithProcessIn(24*time.Hour))
	past := b.newEvent(t, "opts.past", model.WithProcessAt(now.Add(-time.Hour)), model.WithMaxRetry(0))
	grouped := b.newEvent(t, "opts.grouped", model.WithGroup("digest"))
	groupedLater := b.newEvent(t, "opts.grouped", model.WithGroup("digest"), model.WithProcessIn(time.Hour))
	shortRetention := b.newEvent(t, "opts.retention", model.WithTaskRetention(time.Second))
	plain := b.newEvent(t, "opts.plain")

	r := b.newRelay(t, Config{TaskRetention: time.Hour})
	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 7, res.Published, "every event is enqueued at once")

	ti := b.taskInfo(t, scheduled.EventID.String())
	require.Equal(t, asynq.TaskStateScheduled, ti.State)
	require.Equal(t, at.Unix(), ti.NextProcessAt.Unix(), "asynq keeps whole seconds")
	require.Equal(t, 3, ti.MaxRetry)
	require.Equal(t, 30*time.Second, ti.Timeout)
	require.Equal(t, deadline.Unix(), ti.Deadline.Unix())
	require.Equal(t, 48*time.Hour, ti.Retention, "the event's longer retention")
	require.Empty(t, ti.Group)

	ti = b.taskInfo(t, in.EventID.String())
	require.Equal(t, asynq.TaskStateScheduled, ti.State)
	require.Equal(t, in.ProcessAt.Unix(), ti.NextProcessAt.Unix(), "the absolute time NewEvent stored, not the relay's now + 24h")

	ti = b.taskInfo(t, past.EventID.String())
	require.Equal(t, asynq.TaskStatePending, ti.State, "a ProcessAt in the past is pending")
	require.Zero(t, ti.MaxRetry, "0 is kept, not asynq's default")

	ti = b.taskInfo(t, grouped.EventID.String())
	require.Equal(t, asynq.TaskStateAggregating, ti.State)
	require.Equal(t, "digest", ti.Group)

	ti = b.taskInfo(t, groupedLater.EventID.String())
	require.Equal(t, asynq.TaskStateScheduled, ti.State, "scheduled first, aggregating once due")
	require.Equal(t, "digest", ti.Group)

	ti = b.taskInfo(t, shortRetention.EventID.String())
	require.Equal(t, time.Hour, ti.Retention, "a shorter retention never shrinks the relay's dedupe window")

	ti = b.taskInfo(t, plain.EventID.String())
	require.Equal(t, asynq.TaskStatePending, ti.State)
	require.Equal(t, 25, ti.MaxRetry, "asynq's default")
	require.Equal(t, 30*time.Minute, ti.Timeout, "asynq's default")
	require.Equal(t, time.Hour, ti.Retention)

	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, 3, info.Scheduled)
	require.Equal(t, 3, info.Pending)
	require.Equal(t, 1, info.Aggregating)
}

// While a task waits in the scheduled set, its TaskID deduplicates: the relay enqueuing the row again (a
// crash between the enqueue and the commit of the mark) meets a conflict, which counts as delivered.
func TestScheduledTaskDedupes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ev := b.newEvent(t, "opts.scheduled", model.WithProcessIn(time.Hour), model.WithMaxRetry(1))
	r := b.newRelay(t, Config{})
	require.NoError(t, r.rounds.runAll(ctx).Err)
	require.Equal(t, asynq.TaskStateScheduled, b.taskInfo(t, ev.EventID.String()).State)

	_, err := b.db.NewUpdate().Model((*model.Event)(nil)).Set("published_at = NULL").Where("id = ?", ev.ID).Exec(ctx)
	require.NoError(t, err)
	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Published)
	require.Equal(t, 2, b.enq.count(ev.EventID.String()), "enqueued twice")
	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, info.Size, "one task in Redis")
	require.Equal(t, 1, info.Scheduled)
}

// A worker handles a scheduled event once its time has come, and not before; the handler's context
// carries the Timeout and Deadline; grouped events reach the worker's GroupAggregator as one task, and
// asynq deletes the grouped tasks (see Reconciler).
func TestScheduledAndGroupedEventsReachTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	scheduled := b.newEvent(t, "opts.soon", model.WithProcessIn(time.Second))
	deadline := time.Now().Add(5 * time.Minute) // earlier than the timeout: it applies
	timed := b.newEvent(t, "opts.timed", model.WithTimeout(10*time.Minute), model.WithDeadline(deadline))
	timedOut := b.newEvent(t, "opts.timed", model.WithTimeout(10*time.Minute))
	var grouped []*model.Event
	for range 3 {
		grouped = append(grouped, b.newEvent(t, "opts.digest", model.WithGroup("digest")))
	}
	r := b.newRelay(t, Config{})
	require.NoError(t, r.rounds.runAll(ctx).Err)

	var (
		mu          sync.Mutex
		handledAt   = map[string]time.Time{}
		ctxDeadline = map[string]time.Time{}
		aggregated  []*asynq.Task
		digestItems int
	)
	srv := asynq.NewServer(b.redis, asynq.Config{
		Queues: map[string]int{b.queue: 1}, Concurrency: 2, LogLevel: asynq.ErrorLevel,
		TaskCheckInterval: 10 * time.Millisecond, DelayedTaskCheckInterval: 50 * time.Millisecond,
		GroupGracePeriod: time.Second, GroupMaxSize: 3,
		GroupAggregator: asynq.GroupAggregatorFunc(func(group string, tasks []*asynq.Task) *asynq.Task {
			mu.Lock()
			defer mu.Unlock()
			aggregated = append(aggregated, tasks...)
			return asynq.NewTask("opts.digest.batch", []byte(group))
		}),
	})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		mu.Lock()
		defer mu.Unlock()
		if task.Type() == "opts.digest.batch" {
			digestItems++
			return nil
		}
		id := task.Headers()[wire.HeaderEventID]
		handledAt[id] = time.Now()
		ctxDeadline[id], _ = ctx.Deadline()
		return nil
	})))
	t.Cleanup(srv.Shutdown)

	outboxtest.WaitFor(t, 30*time.Second, "the scheduled event handled and the group aggregated", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handledAt) == 3 && digestItems == 1
	})
	mu.Lock()
	defer mu.Unlock()
	// asynq forwards a scheduled task once the Unix second of its time has come.
	require.False(t, handledAt[scheduled.EventID.String()].Before(scheduled.ProcessAt.Truncate(time.Second)),
		"handled at %s, scheduled for %s", handledAt[scheduled.EventID.String()], scheduled.ProcessAt)
	// The handler's context ends at the Deadline, or Timeout after the run started, whichever is earlier.
	require.Equal(t, deadline.Unix(), ctxDeadline[timed.EventID.String()].Unix())
	started := handledAt[timedOut.EventID.String()]
	require.WithinDuration(t, started.Add(10*time.Minute), ctxDeadline[timedOut.EventID.String()], time.Minute)
	require.Len(t, aggregated, 3)
	for _, task := range aggregated {
		require.Equal(t, "opts.digest", task.Type())
	}
	for _, ev := range grouped {
		_, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String())
		require.ErrorIs(t, err, asynq.ErrTaskNotFound, "asynq deletes the tasks it aggregated")
	}
}

// With fan-out, every listener's task carries the event's options; a group becomes one per listener.
func TestFanOutWithDeliveryOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	ev := b.newEvent(t, "order.placed", model.WithProcessAt(at), model.WithMaxRetry(2), model.WithTimeout(time.Minute))
	grouped := b.newEvent(t, "order.placed", model.WithGroup("digest"))
	r := b.newRelay(t, Config{Routes: fanout.Routes{"order.placed": {"email", "stock"}}})
	require.NoError(t, r.rounds.runAll(ctx).Err)

	for _, l := range []string{"email", "stock"} {
		ti := b.taskInfo(t, ev.EventID.String()+":"+l)
		require.Equal(t, fanout.ListenerTaskType("order.placed", l), ti.Type)
		require.Equal(t, asynq.TaskStateScheduled, ti.State)
		require.Equal(t, at.Unix(), ti.NextProcessAt.Unix())
		require.Equal(t, 2, ti.MaxRetry)
		require.Equal(t, time.Minute, ti.Timeout)

		ti = b.taskInfo(t, grouped.EventID.String()+":"+l)
		require.Equal(t, asynq.TaskStateAggregating, ti.State)
		require.Equal(t, "digest:"+l, ti.Group)
	}
	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, 2, info.Scheduled)
	require.Equal(t, 2, info.Aggregating)
}

// admin.ReadBacklog counts the published events whose time is still ahead; cleanup keeps them until PublishedRetention
// after their time.
func TestScheduledBacklogAndCleanup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.newEvent(t, "opts.later", model.WithProcessIn(time.Hour))
	b.newEvent(t, "opts.later", model.WithProcessIn(2*time.Hour))
	b.newEvent(t, "opts.past", model.WithProcessAt(time.Now().Add(-time.Minute)))
	pendingLater := b.newEvent(t, "opts.later", model.WithProcessIn(time.Hour))

	r := b.newRelay(t, Config{PublishedRetention: time.Hour})
	require.NoError(t, r.rounds.runAll(ctx).Err)
	_, err := b.db.ExecContext(ctx, "UPDATE outbox_events SET published_at = NULL WHERE id = ?", pendingLater.ID)
	require.NoError(t, err)
	bl, err := adminOf(t, b.db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, bl.Scheduled, "published and still ahead; the pending one counts as pending")
	require.EqualValues(t, 1, bl.Pending)

	// Published 2 hours ago, past the relay's PublishedRetention of 1 hour: only the rows whose time is also
	// more than PublishedRetention ago go.
	_, err = b.db.ExecContext(ctx, "UPDATE outbox_events SET published_at = now() - interval '2 hours' WHERE published_at IS NOT NULL")
	require.NoError(t, err)
	n, err := r.cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 0, n, "the past ProcessAt is a minute ago, within PublishedRetention")
	_, err = b.db.ExecContext(ctx, "UPDATE outbox_events SET process_at = now() - interval '90 minutes' WHERE event_name = 'opts.past'")
	require.NoError(t, err)
	n, err = r.cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	bl, err = adminOf(t, b.db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, bl.Scheduled)
}
