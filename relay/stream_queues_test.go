package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// TestStreamQueuesCriticalOvertakesBulkBacklog is TestQueuesCriticalOvertakesBulkBacklog on the stream:
// a streamed bulk backlog drains in the lanes of its slices; critical events committed behind it one at a
// time are each enqueued before 2,000 more bulk events are (the round of quiet queues, stream_quiet.go,
// not the next worker's round, takes them), and the latency from each commit to its enqueue's return is
// logged. QUEUES_LATENCY_BACKLOG=100000 and QUEUES_LATENCY_RUNS=20 run the full one.
func TestStreamQueuesCriticalOvertakesBulkBacklog(t *testing.T) {
	cfg := Config{DisableNotify: true}
	if outboxtest.Pooled() {
		cfg.Workers, cfg.DisableReconciler = 1, true // see TestQueuesCriticalOvertakesBulkBacklog
	} else {
		t.Parallel()
	}
	outboxtest.SkipShort(t)
	b := setupStream(t)
	critical, bulk := b.queue+"_critical", b.queue+"_bulk"
	t.Cleanup(func() {
		_ = b.inspector.DeleteQueue(critical, true)
		_ = b.inspector.DeleteQueue(bulk, true)
	})
	backlog, runs := queuesEnvInt(t, "QUEUES_LATENCY_BACKLOG", 20_000), queuesEnvInt(t, "QUEUES_LATENCY_RUNS", 3)
	const batch, spacing = 4000, 1500
	require.Greater(t, backlog, (runs+1)*spacing+batch, "QUEUES_LATENCY_BACKLOG: the backlog must outlast the runs")
	insertQueue(t, b.testBundle, bulk, backlog)
	_, err := b.db.ExecContext(context.Background(), "ANALYZE outbox_events")
	require.NoError(t, err)
	require.EqualValues(t, backlog, countStream(t, b.db).Waiting, "the backlog is streamed")

	for _, strict := range []bool{false, true} {
		enq := &queueEnqueuer{Enqueuer: b.enq, watch: critical}
		cfg.Queues, cfg.BatchSize, cfg.Enqueuer, cfg.StrictPriority = map[string]int{critical: 6, "default": 3, bulk: 1}, batch, enq, strict
		r := b.newRelay(t, cfg)
		res := measureCritical(t, b.db, r, enq, critical, runs, spacing, 0)
		for i, lat := range res.latencies {
			t.Logf("strict %v, critical event %d: enqueued %s after its commit, %d bulk events enqueued meanwhile", strict, i, lat, res.between[i])
			require.Less(t, res.between[i], int64(batch/2), "critical event %d: enqueued before half a bulk round more", i)
		}
		t.Logf("strict %v: commit to enqueue of %d critical events behind a %d-event streamed bulk backlog (BatchSize %d): %s",
			strict, runs, backlog, batch, res.summary())
		require.Positive(t, countStream(t, b.db).Waiting, "the backlog outlasted the runs")
	}
}
