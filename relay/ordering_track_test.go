package relay

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/maintenance/keytrack"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/taskmap"
)

// TestOrderingTrackerRedisErrorIsNoMissingTask: the tracker reads the states of the tasks in flight in one
// pipeline. A Redis error on any of its commands (here WRONGTYPE, after a missing task whose Nil is the
// pipeline's first error) is an outage of the tracker: the pass fails, nothing is requeued or handed on.
func TestOrderingTrackerRedisErrorIsNoMissingTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	events := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"a", 0}, {"b", 0}, {"a", 1}, {"b", 1}})
	r := b.newRelay(t, Config{})
	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 2, res.Published, "the heads of a and b")

	admin := redis.NewClient(&redis.Options{Addr: outboxtest.RedisAddr()})
	t.Cleanup(func() { _ = admin.Close() })
	require.NoError(t, b.inspector.DeleteTask(b.queue, events[0].EventID.String())) // missing: Nil
	require.NoError(t, admin.Set(ctx, taskmap.TaskKey(b.queue, events[1].EventID.String()), "not a hash", 0).Err())

	_, err := r.keys.RunOnce(ctx)
	require.ErrorContains(t, err, "WRONGTYPE")
	require.ErrorContains(t, err, events[1].EventID.String())
	require.EqualValues(t, 2, outboxtest.CountDelivered(t, b.db, ""), "nothing requeued")
	require.Zero(t, outboxtest.Count(t, b.db, "outbox_events", "completed_at IS NOT NULL OR dead_at IS NOT NULL"))

	// Redis answers again: the lost tasks are found missing and enqueued again, in their keys' order.
	require.NoError(t, admin.Del(ctx, taskmap.TaskKey(b.queue, events[1].EventID.String())).Err())
	tr, err := r.keys.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, keytrack.Result{InFlight: 2, Requeued: 2}, tr)
}
