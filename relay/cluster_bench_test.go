package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/relay"
)

// BenchmarkClusterDrain compares, on a private 3-node Redis Cluster, a relay on its own auto-pipelined
// client (the default: the script calls of concurrent enqueues go as one pipeline per node) with a relay
// on a plain asynq.Client (Config.Enqueuer: one round trip per enqueue). The two alternate in 10
// segments of 6,000 rows over six queues (two per node), so both see the same load on a shared machine;
// it reports each one's rate and their ratio:
//
//	go test -run '^$' -bench ClusterDrain -benchtime 1x ./relay/
func BenchmarkClusterDrain(b *testing.B) {
	const segments, perQueue = 10, 1000
	cb := setupCluster(b, &outboxtest.RedisOptions{NoPersistence: true})
	plain := asynq.NewClient(cb.opt)
	b.Cleanup(func() { _ = plain.Close() })
	var took [2]time.Duration
	rows := 0
	for range b.N {
		for range segments {
			for arm := range 2 {
				n := len(cb.insert(b, perQueue))
				cfg := relay.Config{DisableNotify: true, PollInterval: 5 * time.Millisecond}
				if arm == 1 {
					cfg.Enqueuer = plain
				}
				took[arm] += drain(b, cb, cfg, n)
				if arm == 0 {
					rows += n
				}
			}
		}
	}
	pipelined, unpipelined := float64(rows)/took[0].Seconds(), float64(rows)/took[1].Seconds()
	b.ReportMetric(pipelined, "pipelined_rows/s")
	b.ReportMetric(unpipelined, "plain_rows/s")
	b.ReportMetric(pipelined/unpipelined, "pipelined/plain")
}

// drain runs a relay with cfg until it has published n rows, and returns how long that took.
func drain(b *testing.B, cb *clusterBundle, cfg relay.Config, n int) time.Duration {
	b.Helper()
	published := make(chan int, 1024)
	cfg.Observer.OnBatch = func(_ context.Context, ev relay.BatchEvent) { published <- ev.Published }
	r, err := relay.New(cb.db, cb.opt, cfg)
	require.NoError(b, err)
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	timeout := time.After(5 * time.Minute)
	for got := 0; got < n; {
		select {
		case p := <-published:
			got += p
		case <-timeout:
			b.Fatalf("published fewer than %d rows within 5m", n)
		}
	}
	d := time.Since(start)
	cancel()
	require.NoError(b, <-done)
	return d
}
