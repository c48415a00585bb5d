package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// A scheduled task is present for the reconciler (asynq keeps it as "scheduled"), however long ago its
// row was published; once Redis lost it, it is enqueued again with the options of its row, for the same
// time. Grouped events are not checked: asynq deletes the tasks it aggregates.
func TestReconcilerWithScheduledTasks(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	now := time.Now()
	newEvent := func(opts ...model.Option) *model.Event {
		t.Helper()
		ev, err := model.NewEvent("reconcile.test", nil, append([]model.Option{model.WithQueue(b.queue)}, opts...)...)
		require.NoError(t, err)
		_, err = b.db.NewInsert().Model(ev).Exec(ctx)
		require.NoError(t, err)
		return ev
	}
	scheduled := newEvent(model.WithProcessAt(now.Add(24*time.Hour)), model.WithMaxRetry(2), model.WithTimeout(time.Minute))
	due := newEvent(model.WithProcessAt(now.Add(-10 * time.Minute)))
	plain := newEvent()
	plainOld := newEvent()
	newEvent(model.WithGroup("digest"))
	b.relayAll(t)
	ti, err := b.inspector.GetTaskInfo(b.queue, scheduled.EventID.String())
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateScheduled, ti.State)

	// Published 2 hours ago, before the Window of 1 hour: only the rows whose time is within the
	// Window or ahead are still checked.
	_, err = b.db.ExecContext(ctx, "UPDATE outbox_events SET published_at = now() - interval '2 hours' WHERE id IN (?, ?, ?)",
		scheduled.ID, due.ID, plainOld.ID)
	require.NoError(t, err)

	rc := newReconciler(t, b, relay.ReconcilerConfig{Window: time.Hour})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.Checked, "scheduled, due and plain; not plainOld (before the Window) nor the grouped one")
	require.Zero(t, res.Missing, "a scheduled task is present")

	b.redis.Stop(t)
	b.redis.Start(t)
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.Missing)
	require.Equal(t, 3, res.Requeued)
	var requeued []int64
	require.NoError(t, b.db.NewRaw("SELECT id FROM outbox_events WHERE published_at IS NULL ORDER BY id").Scan(ctx, &requeued))
	require.Equal(t, []int64{scheduled.ID, due.ID, plain.ID}, requeued)

	b.relayAll(t)
	ti, err = b.inspector.GetTaskInfo(b.queue, scheduled.EventID.String())
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateScheduled, ti.State)
	require.Equal(t, scheduled.ProcessAt.Unix(), ti.NextProcessAt.Unix(), "the same time, not 24h from the requeue")
	require.Equal(t, 2, ti.MaxRetry)
	require.Equal(t, time.Minute, ti.Timeout)
	ti, err = b.inspector.GetTaskInfo(b.queue, due.EventID.String())
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStatePending, ti.State, "its time has passed")

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.Checked)
	require.Zero(t, res.Missing)
	require.EqualValues(t, 0, outboxtest.CountUndelivered(t, b.db, ""))
}
