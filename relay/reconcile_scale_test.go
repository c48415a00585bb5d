package relay_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/relay"
)

// TestReconcileScale measures the reconciler at scale; it runs only when BUNBOX_SCALE_ROWS is set:
//
//	BUNBOX_SCALE_ROWS=1000000 go test -run TestReconcileScale -v -timeout 60m ./relay/
//
// It fills a fresh schema with that many rows (generate_series, four queues), has a relay publish them
// into a private Redis without persistence (the matching asynq tasks), and reports: the time of the
// reconciler's passes with every row in the window, the same after 10,000 more rows were published,
// and after a Redis restart (a relay running) the time of the pass that finds the loss and the time
// until every row is back in Redis. The file uses only
// the API that predates the incremental reconciler, so it measures the old one too.
func TestReconcileScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BUNBOX_SCALE_ROWS"))
	if n <= 0 {
		t.Skip("set BUNBOX_SCALE_ROWS to measure")
	}
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	opt := asynq.RedisClientOpt{Addr: rd.Addr(), PoolSize: 64}
	fill := func(rows int) {
		start := time.Now()
		for done := 0; done < rows; done += 100_000 { // in statements short enough for the driver's timeout
			_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload)
SELECT gen_random_uuid(), 'scale.test', 'scale' || (i % 4), '{"n":1}'::jsonb FROM generate_series(1, ?) AS i`,
				min(100_000, rows-done))
			require.NoError(t, err)
		}
		t.Logf("inserted %d rows in %s", rows, time.Since(start).Round(time.Millisecond))
	}
	startRelay := func() (wait func(what string)) {
		start := time.Now()
		r, err := relay.New(db, opt, relay.Config{DisableNotify: true, Logger: outboxtest.Logger(t)})
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		return func(what string) {
			outboxtest.WaitFor(t, 60*time.Minute, "every row published", func() bool {
				return outboxtest.CountUndelivered(t, db, "") == 0
			})
			t.Logf("%s: every row published %s after the relay started", what, time.Since(start).Round(time.Millisecond))
			cancel()
			require.NoError(t, <-done)
			require.NoError(t, r.Close())
		}
	}
	publish := func(what string) { startRelay()(what) }
	fill(n)
	publish("fill")
	_, err := db.ExecContext(ctx, "VACUUM ANALYZE outbox_events")
	require.NoError(t, err)

	rc, err := relay.NewReconciler(db, opt, relay.ReconcilerConfig{Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	defer rc.Close()
	pass := func(what string) relay.ReconcileResult {
		res, err := rc.ReconcileOnce(ctx)
		require.NoError(t, err)
		t.Logf("%s: %s", what, fmt.Sprintf("%+v", res))
		return res
	}
	pass("pass 1, every row in the window")
	pass("pass 2, nothing published since pass 1")
	fill(10_000)
	publish("10,000 more")
	pass("pass 3, 10,000 published since pass 2")

	// Redis restarts empty while a relay runs, as in production: the relay publishes the rows the pass
	// requeues while the pass goes on.
	rd.Stop(t)
	rd.Start(t)
	wait := startRelay()
	res := pass("pass 4, after a Redis restart without persistence, a relay running")
	require.Equal(t, n+10_000, res.Requeued)
	wait("re-delivery after the restart")
	pass("pass 5, after the re-delivery")
}
