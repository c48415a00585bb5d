package reconcile_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/maintenance/reconcile"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// A streamed row written and delivered while a pass reads its bounds (between its read of the cursors and
// of the clock) is looked up by that pass or the next: a pass reads the rows created up to its clock, and
// the next one from the bounds of the cursors this one read. Read in the other order, the row was created
// after the clock and delivered before the cursors' read, and neither pass read it (a Redis loss in
// TestQuickStartSurvivesRedisDataLoss left it in no queue).
func TestPassLooksUpARowDeliveredBetweenItsReads(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	require.NoError(t, relay.EnableStream(ctx, db, model.Location{}))
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	rdb := redis.NewClient(&redis.Options{Addr: rd.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	r, err := reconcile.New(db, tables.Default(), reconcile.Config{Redis: rdb, Logger: outboxtest.Logger(t)})
	require.NoError(t, err)

	_, err = r.RunOnce(ctx) // the first pass, a sweep of nothing
	require.NoError(t, err)
	reconcile.SetBetweenReads(r, func() {
		ev, err := model.NewEvent("reads.test", map[string]int{"n": 1})
		require.NoError(t, err)
		_, err = db.NewInsert().Model(ev).Exec(ctx)
		require.NoError(t, err)
		outboxtest.DeliverStream(t, db) // delivered, its task never enqueued: missing
	})
	second, err := r.RunOnce(ctx)
	require.NoError(t, err)
	reconcile.SetBetweenReads(r, nil)
	third, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, second.Missing+third.Missing, "passes: %+v, then %+v", second, third)
}
