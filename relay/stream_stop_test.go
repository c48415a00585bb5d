package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// A relay stopped five times in the middle of a backlog of 1,000 streamed rows, with the enqueues of a
// round running in parallel (the default Concurrency): no stop enqueues a row twice. The rows a stop
// released before a row that reached Redis are handed to the per-row path, and the cursor moves past every
// row that reached Redis, so the relay after each stop neither skips a row nor sends one again.
func TestStreamStopsSendNothingTwice(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	events := b.record(t, b.db, 1000)
	for stop := range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		at := (stop + 1) * 150
		b.enq.before = func(n int) {
			if n == at {
				cancel()
			}
		}
		r := b.newRelay(t, Config{BatchSize: 100, DisableReconciler: true})
		require.NoError(t, r.Run(ctx))
		cancel()
		b.enq.before = nil
		require.Less(t, countStream(t, b.db).Delivered, int64(len(events)), "stop %d came before the end", stop)
	}
	run(t, b.newRelay(t, Config{BatchSize: 100, DisableReconciler: true}))
	b.waitQueued(t, len(events))
	outboxtest.WaitFor(t, streamWait, "every row delivered", func() bool {
		c := countStream(t, b.db)
		return c.Waiting == 0 && outboxtest.Count(t, b.db, "outbox_events", "published_at IS NULL") == 0
	})
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	b.requireEnqueuedOnce(t, events)
	t.Logf("rows handed to the per-row path by the stops: %d", countStream(t, b.db).Classic)
}
