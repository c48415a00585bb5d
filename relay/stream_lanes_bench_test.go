package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// BenchmarkStreamLanesDrain drains backlogs of streamed rows spread over 1, 2 and 4 lanes (the slices of
// one queue: stream_slice's default set to floor(random() * lanes)) with one relay of 4 workers, which
// stream up to 4 lanes at once, alternating the three in segments so that they see the same load on a
// shared machine, and reports each one's rate and the ratios to one lane. STREAM_LANES_RELAYS=3 drains
// with three relays of 2 workers instead.
//
//	go test -run '^$' -bench StreamLanesDrain -benchtime 1x ./relay/
func BenchmarkStreamLanesDrain(b *testing.B) {
	outboxtest.SkipShort(b)
	const rounds, n = 2, 20_000
	lanes := []int{1, 2, 4}
	relays := queuesEnvInt(b, "STREAM_LANES_RELAYS", 1)
	workers := 4
	if relays > 1 {
		workers = 2
	}
	db, redis, queue, _ := benchSetup(b)
	ctx := context.Background()
	ob := bunx.New(db)
	if err := EnableStream(ctx, db, model.Location{}); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		took := map[int]time.Duration{}
		for range rounds {
			for _, k := range lanes {
				if _, err := db.ExecContext(ctx, fmt.Sprintf(
					"ALTER TABLE outbox_events ALTER COLUMN stream_slice SET DEFAULT floor(random() * %d)::smallint", k)); err != nil {
					b.Fatal(err)
				}
				recordEvents(b, ob, db, queue, n)
				if _, err := db.ExecContext(ctx, "VACUUM ANALYZE outbox_events"); err != nil {
					b.Fatal(err)
				}
				took[k] += drainStream(b, db, redis, relays, workers, n)
			}
		}
		for _, k := range lanes {
			rate := float64(rounds*n) / took[k].Seconds()
			b.ReportMetric(rate, fmt.Sprintf("events/s_%dlanes", k))
			if k > 1 {
				b.ReportMetric(took[1].Seconds()/took[k].Seconds(), fmt.Sprintf("ratio_%dlanes", k))
			}
		}
	}
}

// drainStream runs relays relays of workers workers over db until they published n rows, and returns how
// long it took.
func drainStream(b *testing.B, db *bun.DB, redis asynq.RedisClientOpt, relays, workers, n int) time.Duration {
	b.Helper()
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var published atomic.Int64
	cfg := Config{DisableNotify: true, DisableReconciler: true, PublishedRetention: -1, Workers: workers}
	cfg.Observer.OnBatch = func(_ context.Context, ev BatchEvent) {
		if published.Add(int64(ev.Published)) >= int64(n) {
			cancel()
		}
	}
	var rs []*Relay
	for range relays {
		r, err := New(db, redis, cfg)
		if err != nil {
			b.Fatal(err)
		}
		rs = append(rs, r)
	}
	start := time.Now()
	errs := make(chan error, relays)
	for _, r := range rs {
		go func() { errs <- r.Run(runCtx) }()
	}
	for range rs {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	for _, r := range rs {
		_ = r.Close()
	}
	if got := published.Load(); got < int64(n) {
		b.Fatalf("%d of %d rows published", got, n)
	}
	return took
}
