package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// BenchmarkStreamReadAhead drains backlogs of streamed rows with stream rounds of one batch (the round
// before read-ahead) and of up to streamRoundBatches batches, alternating in segments so that both see the
// same load on a shared machine, and reports each one's rate and their ratio:
//
//	go test -run '^$' -bench StreamReadAhead -benchtime 1x ./relay/
func BenchmarkStreamReadAhead(b *testing.B) {
	outboxtest.SkipShort(b)
	const segments, n = 6, 20_000
	db, redis, queue, _ := benchSetup(b)
	ctx := context.Background()
	ob := bunx.New(db)
	if err := EnableStream(ctx, db, model.Location{}); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		took := map[int]time.Duration{}
		for s := range segments {
			batches := []int{1, streamRoundBatches}[s%2]
			recordEvents(b, ob, db, queue, n)
			if _, err := db.ExecContext(ctx, "VACUUM ANALYZE outbox_events"); err != nil {
				b.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			var published atomic.Int64
			cfg := Config{DisableNotify: true, DisableReconciler: true, PublishedRetention: -1}
			cfg.Observer.OnBatch = func(_ context.Context, ev BatchEvent) {
				if published.Add(int64(ev.Published)) >= n {
					cancel()
				}
			}
			r, err := New(db, redis, cfg)
			if err != nil {
				b.Fatal(err)
			}
			r.stream.batches = batches
			start := time.Now()
			if err := r.Run(runCtx); err != nil {
				b.Fatal(err)
			}
			took[batches] += time.Since(start)
			_ = r.Close()
			cancel()
			if got := published.Load(); got < n {
				b.Fatalf("segment %d: %d of %d rows published", s, got, n)
			}
		}
		per := float64(segments / 2 * n)
		one, ahead := per/took[1].Seconds(), per/took[streamRoundBatches].Seconds()
		b.ReportMetric(one, "events/s_1batch")
		b.ReportMetric(ahead, fmt.Sprintf("events/s_%dbatches", streamRoundBatches))
		b.ReportMetric(ahead/one, "ratio")
	}
}
