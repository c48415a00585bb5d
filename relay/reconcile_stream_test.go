package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// insertRow writes a row of the bundle's queue with the table's defaults (a streamed row while the stream
// is on), created createdAgo ago, and returns its event id.
func (b *reconcileBundle) insertRow(t *testing.T, createdAgo time.Duration) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := b.db.ExecContext(context.Background(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, created_at)
VALUES (?, 'reconcile.test', ?, '{}', now() - make_interval(secs => ?::float8))`, id, b.queue, createdAgo.Seconds())
	require.NoError(t, err)
	return id
}

// publishedAt returns the row's published_at as text ("infinity" for a streamed row; "" when NULL).
func (b *reconcileBundle) publishedAt(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var at *string
	require.NoError(t, b.db.NewRaw("SELECT published_at::text FROM outbox_events WHERE event_id = ?", id).Scan(context.Background(), &at))
	if at == nil {
		return ""
	}
	return *at
}

// The reconciler checks the streamed rows the cursor has delivered, placed in its window by their
// created_at, and requeues one whose task Redis does not have, in its first pass (a sweep) and in an
// incremental pass; a waiting streamed row is never looked at, nor a delivered one created before the
// window.
func TestReconcilerChecksDeliveredStreamedRows(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	require.NoError(t, relay.EnableStream(ctx, b.db, model.Location{}))

	lost := b.insertRow(t, 0)
	kept := b.insertRow(t, 0)
	old := b.insertRow(t, 2*time.Hour)
	outboxtest.DeliverStream(t, b.db)
	client := asynq.NewClient(b.opt)
	t.Cleanup(func() { _ = client.Close() })
	_, err := client.Enqueue(asynq.NewTask("reconcile.test", nil), asynq.TaskID(kept.String()), asynq.Queue(b.queue))
	require.NoError(t, err)

	rc := newReconciler(t, b, relay.ReconcilerConfig{Window: time.Hour, BatchSize: 1})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.True(t, res.Swept)
	require.Equal(t, 2, res.Checked, "the two delivered rows within the window")
	require.Equal(t, 1, res.Missing)
	require.Equal(t, 1, res.Requeued)
	require.Equal(t, []relay.MissingTask{{EventID: lost, Queue: b.queue}}, res.MissingTasks)
	require.Empty(t, b.publishedAt(t, lost), "requeued: a pending row of the per-row path")
	require.Equal(t, "infinity", b.publishedAt(t, kept))
	require.Equal(t, "infinity", b.publishedAt(t, old), "created before the window: not looked at")

	// The next pass is incremental: it reads the rows the cursor delivered since the first pass read it.
	lostLater := b.insertRow(t, 0)
	outboxtest.DeliverStream(t, b.db)
	waiting := b.insertRow(t, 0)
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.False(t, res.Swept)
	require.Equal(t, 1, res.Missing)
	require.Equal(t, 1, res.Requeued)
	require.Equal(t, []relay.MissingTask{{EventID: lostLater, Queue: b.queue}}, res.MissingTasks)
	require.Empty(t, b.publishedAt(t, lostLater))
	require.Equal(t, "infinity", b.publishedAt(t, waiting), "a waiting row has no task yet: the stream delivers it")

	// A sweep looks at the waiting row neither; the requeued rows are classic pending rows now.
	res, err = rc.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Checked, "only the delivered row whose task is there")
	require.Zero(t, res.Missing)
	require.Equal(t, "infinity", b.publishedAt(t, waiting))
}

// A row the reconciler requeued while the stream is on is delivered again by the relay's per-row path.
func TestReconcilerRequeuedStreamedRowIsDelivered(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	require.NoError(t, relay.EnableStream(ctx, b.db, model.Location{}))
	id := b.insertRow(t, 0)
	outboxtest.DeliverStream(t, b.db)
	rc := newReconciler(t, b, relay.ReconcilerConfig{})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Requeued)
	require.Empty(t, b.publishedAt(t, id))
	b.relayAll(t)
	_, err = b.inspector.GetTaskInfo(b.queue, id.String())
	require.NoError(t, err, "the task is back in Redis")
}

// A sweep checks a delivered streamed row created before the window whose ProcessAt is still ahead (its
// task waits in asynq's scheduled set), as it does a published row of the per-row path.
func TestReconcilerSweepsScheduledStreamedRows(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	require.NoError(t, relay.EnableStream(ctx, b.db, model.Location{}))
	id := b.insertRow(t, 2*time.Hour)
	_, err := b.db.ExecContext(ctx, "UPDATE outbox_events SET process_at = now() + interval '1 hour' WHERE event_id = ?", id)
	require.NoError(t, err)
	outboxtest.DeliverStream(t, b.db)
	rc := newReconciler(t, b, relay.ReconcilerConfig{Window: time.Hour})
	res, err := rc.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Checked)
	require.Equal(t, 1, res.Requeued)
	require.Empty(t, b.publishedAt(t, id))
}

// A sweep by a Reconciler older than its Window starts its read of the stream's index at a mark taken
// before the window began, and still finds a lost task of a row created within the window, and of one
// created before it whose ProcessAt is ahead (read from the index's start).
func TestReconcilerSweepFromAMark(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	require.NoError(t, relay.EnableStream(ctx, b.db, model.Location{}))
	const window = 2 * time.Second
	// Written before the mark (its xid is below the mark's), delivered after it.
	scheduled := b.insertRow(t, time.Hour)
	_, err := b.db.ExecContext(ctx, "UPDATE outbox_events SET process_at = now() + interval '1 hour' WHERE event_id = ?", scheduled)
	require.NoError(t, err)
	rc := newReconciler(t, b, relay.ReconcilerConfig{Window: window})
	res, err := rc.ReconcileOnce(ctx) // the mark
	require.NoError(t, err)
	require.Zero(t, res.Checked, "the row waits")
	marked := time.Now()
	outboxtest.WaitFor(t, 10*time.Second, "the mark older than the window", func() bool { return time.Since(marked) > window+time.Second })
	old := b.insertRow(t, time.Hour) // before the window: not checked
	lost := b.insertRow(t, 0)
	outboxtest.DeliverStream(t, b.db)
	res, err = rc.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []relay.MissingTask{{EventID: lost, Queue: b.queue}, {EventID: scheduled, Queue: b.queue}}, res.MissingTasks,
		"the row created within the window, then the one created before it whose ProcessAt is ahead")
	require.Empty(t, b.publishedAt(t, lost))
	require.Equal(t, "infinity", b.publishedAt(t, old))
}
