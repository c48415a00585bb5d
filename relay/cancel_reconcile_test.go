package relay_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/relay"
)

// TestReconcilerSkipsCancelledAfterRedisLoss: Redis restarts empty after an event was published and
// then cancelled; the reconciler re-delivers its sibling but never the cancelled event.
func TestReconcilerSkipsCancelledAfterRedisLoss(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	ob := bunx.New(b.db)
	events := b.insert(t, 2)
	b.relayAll(t)
	b.requireTasks(t, events)
	cancelled, kept := events[0], events[1]
	require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return ob.Cancel(ctx, tx, cancelled.EventID)
	}))

	b.redis.Stop(t)
	b.redis.Start(t)

	rc := newReconciler(t, b, relay.ReconcilerConfig{})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Checked, "the cancelled row is not looked at")
	require.Equal(t, 1, res.Requeued)
	require.Equal(t, []relay.MissingTask{{EventID: kept.EventID, Queue: b.queue}}, res.MissingTasks)

	b.relayAll(t) // also settles the cancel: its task is gone
	b.requireTasks(t, events[1:])
	_, err = b.inspector.GetTaskInfo(b.queue, cancelled.EventID.String())
	require.ErrorIs(t, err, asynq.ErrTaskNotFound)
	require.EqualValues(t, 1, outboxtest.CountDelivered(t, b.db, "event_id = ?", cancelled.EventID))

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Missing)
}
