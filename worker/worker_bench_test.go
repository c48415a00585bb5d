package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/worker"
)

// BenchmarkCommitToHandler measures commit-to-handler latency (from the producer's commit returning to
// the handler starting) through a real relay (its default Config, no NOTIFY trigger), Redis and asynq
// server, for an asynq server with asynq's defaults and one configured by worker.ServerConfig. Each runs 200
// single-event transactions per second for 3 s after a warm-up, and reports p50 and p99:
//
//	go test -run '^$' -bench CommitToHandler -benchtime 1x ./worker/
func BenchmarkCommitToHandler(b *testing.B) {
	for _, mode := range []struct {
		name string
		cfg  asynq.Config
	}{
		{"AsynqDefaults", asynq.Config{}},
		{"ServerConfig", worker.ServerConfig(asynq.Config{})},
	} {
		b.Run(mode.name, func(b *testing.B) {
			for range b.N {
				p50, p99 := measureToHandler(b, mode.cfg, 200, 3*time.Second, 0)
				b.ReportMetric(p50, "p50_ms")
				b.ReportMetric(p99, "p99_ms")
			}
		})
	}
}

// BenchmarkScheduledToHandler measures how late a scheduled event reaches its handler: events made with
// model.WithProcessAt one second ahead, 50 per second for 3 s, and the time from that moment to the
// handler starting (negative: early, see measureToHandler), for asynq's defaults
// (DelayedTaskCheckInterval 5s) and worker.ServerConfig:
//
//	go test -run '^$' -bench ScheduledToHandler -benchtime 1x ./worker/
func BenchmarkScheduledToHandler(b *testing.B) {
	for _, mode := range []struct {
		name string
		cfg  asynq.Config
	}{
		{"AsynqDefaults", asynq.Config{}},
		{"ServerConfig", worker.ServerConfig(asynq.Config{})},
	} {
		b.Run(mode.name, func(b *testing.B) {
			for range b.N {
				p50, p99 := measureToHandler(b, mode.cfg, 50, 3*time.Second, time.Second)
				b.ReportMetric(p50, "p50_ms")
				b.ReportMetric(p99, "p99_ms")
			}
		})
	}
}

// measureToHandler commits rate single-event transactions per second for d and returns the p50 and p99,
// in milliseconds, of the time from each commit (or, with schedule > 0, from the moment schedule after the
// commit that the event was scheduled for with model.WithProcessAt) to its handler starting.
func measureToHandler(b *testing.B, cfg asynq.Config, rate int, d, schedule time.Duration) (p50, p99 float64) {
	b.Helper()
	db, _ := outboxtest.Schema(b)
	ctx := context.Background()
	redisOpt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	queue := "bench_" + hex.EncodeToString(rnd[:])

	var mu sync.Mutex
	committed := map[string]time.Time{}
	handled := map[string]time.Time{}
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench.handler", func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		mu.Lock()
		handled[t.Headers()[wire.HeaderEventID]] = now
		mu.Unlock()
		return nil
	})
	cfg.Queues = map[string]int{queue: 1}
	cfg.Concurrency = 20
	cfg.LogLevel = asynq.ErrorLevel
	srv := asynq.NewServer(redisOpt, cfg)
	if err := srv.Start(mux); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	r, err := relay.New(db, redisOpt, relay.Config{PublishedRetention: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			b.Error(err)
		}
		ins := asynq.NewInspector(redisOpt)
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	}()

	commit := func(i int, at time.Time) string {
		opts := []model.Option{model.WithQueue(queue)}
		if !at.IsZero() {
			opts = append(opts, model.WithProcessAt(at))
		}
		ev, err := model.NewEvent("bench.handler", map[string]int{"i": i}, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.NewInsert().Model(ev).Exec(ctx); err != nil {
			b.Fatal(err)
		}
		return ev.EventID.String()
	}
	allHandled := func(ids map[string]time.Time) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for id := range ids {
				if _, ok := handled[id]; !ok {
					return false
				}
			}
			return true
		}
	}
	// Warm up: connections open, the first tasks handled.
	warm := map[string]time.Time{}
	for i := range 20 {
		warm[commit(i, time.Time{})] = time.Time{}
	}
	outboxtest.WaitFor(b, 30*time.Second, "the warm-up handled", allHandled(warm))

	total := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range total {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait) // pacing the load, not waiting for a result
		}
		var at time.Time
		if schedule > 0 {
			at = time.Now().Add(schedule)
		}
		id := commit(i, at)
		ref := time.Now()
		if schedule > 0 {
			ref = at
		}
		mu.Lock()
		committed[id] = ref
		mu.Unlock()
	}
	outboxtest.WaitFor(b, 30*time.Second, "every event handled", allHandled(committed))

	mu.Lock()
	defer mu.Unlock()
	lat := make([]float64, 0, len(committed))
	early := 0
	for id, c := range committed {
		l := handled[id].Sub(c)
		if l < 0 {
			early++
			if schedule == 0 {
				l = 0 // clock granularity: the handler cannot run before the commit returned
			}
		}
		lat = append(lat, l.Seconds()*1000)
	}
	if schedule > 0 {
		// asynq keeps a scheduled task's time in whole seconds (the Unix second of ProcessAt) and forwards it
		// once that second has begun: a task may run up to 1s early. Negative values are those.
		b.Logf("%d of %d events handled before their ProcessAt", early, len(lat))
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.Logf("%d events at %d/s, scheduled %s ahead: p50 %.1f ms, p99 %.1f ms, max %.1f ms", len(lat), rate, schedule, q(0.5), q(0.99), lat[len(lat)-1])
	return q(0.5), q(0.99)
}
