package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// BenchmarkOrderingHandoff measures what per-key ordering costs a key: the delay from the success of
// event n's handler to the start of event n+1's handler, over 20 keys of 50 events each, with one relay
// (defaults, KeyCheckInterval 10ms) and a worker of concurrency 20 with TaskCheckInterval 10ms.
//
//	go test -run '^$' -bench OrderingHandoff -benchtime 1x ./relay/
func BenchmarkOrderingHandoff(b *testing.B) {
	const keys, perKey = 20, 50
	for range b.N {
		db, redis, queue, _ := benchSetup(b)
		var items []keyedPayload
		for n := range perKey {
			for k := range keys {
				items = append(items, keyedPayload{Key: fmt.Sprintf("key-%d", k), Seq: n})
			}
		}
		insertKeyed(b, db, queue, "bench.keyed", items)
		rec := newSequenceRecorder()
		srv := asynq.NewServer(redis, asynq.Config{
			Queues: map[string]int{queue: 1}, Concurrency: keys, TaskCheckInterval: 10 * time.Millisecond,
			Logger: quietAsynqLogger{}, LogLevel: asynq.FatalLevel,
		})
		if err := srv.Start(recordingHandler(rec, nil)); err != nil {
			b.Fatal(err)
		}
		r, err := New(db, redis, Config{DisableNotify: true, PublishedRetention: -1, Logger: outboxtest.Logger(b)})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- r.Run(ctx) }()
		outboxtest.WaitFor(b, 5*time.Minute, "every keyed event handled", func() bool {
			return outboxtest.Count(b, db, "outbox_events", "completed_at IS NULL") == 0
		})
		elapsed := time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		_ = r.Close()
		srv.Shutdown()
		rec.mu.Lock()
		if len(rec.violations) > 0 {
			b.Fatalf("ordering violated: %v", rec.violations[:min(5, len(rec.violations))])
		}
		rec.mu.Unlock()
		ds := rec.handoffDelays()
		pct := func(ds []time.Duration, p float64) float64 {
			slices.Sort(ds)
			return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000
		}
		b.ReportMetric(pct(ds, 0.5), "handoff_p50_ms")
		b.ReportMetric(pct(ds, 0.99), "handoff_p99_ms")
		b.ReportMetric(pct(ds, 1), "handoff_max_ms")
		// The handoff in two parts: from the handler's success to the tracker's completed_at (the look-up),
		// and from there to the next handler's start (claim, enqueue, the worker's pick-up).
		var rows []struct {
			Key         string    `bun:"ordering_key"`
			Payload     string    `bun:"payload"`
			CompletedAt time.Time `bun:"completed_at"`
			PublishedAt time.Time `bun:"published_at"`
		}
		if err := db.NewRaw("SELECT ordering_key, payload::text AS payload, completed_at, published_at FROM outbox_events").Scan(context.Background(), &rows); err != nil {
			b.Fatal(err)
		}
		var detect, rest, wakeD []time.Duration
		pub := map[string]time.Time{}
		for _, row := range rows {
			var p keyedPayload
			_ = json.Unmarshal([]byte(row.Payload), &p)
			pub[fmt.Sprint(row.Key, "#", p.Seq)] = row.PublishedAt
		}
		rec.mu.Lock()
		for _, row := range rows {
			var p keyedPayload
			_ = json.Unmarshal([]byte(row.Payload), &p)
			end, ok1 := rec.ends[fmt.Sprint(row.Key, "#", p.Seq)]
			next, ok2 := rec.starts[fmt.Sprint(row.Key, "#", p.Seq+1)]
			if ok1 {
				detect = append(detect, row.CompletedAt.Sub(end))
			}
			if ok2 {
				rest = append(rest, next.Sub(row.CompletedAt))
				wakeD = append(wakeD, pub[fmt.Sprint(row.Key, "#", p.Seq+1)].Sub(row.CompletedAt))
			}
		}
		rec.mu.Unlock()
		b.ReportMetric(pct(detect, 0.5), "success_to_completed_p50_ms")
		b.ReportMetric(pct(rest, 0.5), "completed_to_next_start_p50_ms")
		b.ReportMetric(pct(wakeD, 0.5), "completed_to_claim_p50_ms")
		b.ReportMetric(float64(len(items))/elapsed.Seconds(), "keyed_events/s")
		b.ReportMetric(float64(len(items))/elapsed.Seconds()/keys, "events/s_per_key")
	}
}

// BenchmarkOrderingUnkeyedCost measures what keyed events cost the unkeyed ones: one relay drains 40,000
// rows of which every tenth goes to a queue of its own, the others to a queue nobody handles. In arm
// plain that tenth is unkeyed; in arm keyed10 it is keyed over 100 keys, so the relay claims key heads
// and tracks their tasks. It reports the rate at which the other nine tenths (36,000 unkeyed rows) were
// published in each arm and their ratio; the arms alternate (ABBA, four times each) so that both see the
// same load on a shared machine; it also reports this process's CPU per published row. In the
// sub-benchmark worker, a worker of concurrency 20 in this process
// handles the tenth's queue, so keys move on (and the worker's own work competes for the cores); in
// noworker nothing handles it, so each key's head stays in flight and the tracker keeps looking it up
// while the rest of the key waits.
//
//	go test -run '^$' -bench OrderingUnkeyedCost -benchtime 1x ./relay/
func BenchmarkOrderingUnkeyedCost(b *testing.B) {
	for _, withWorker := range []bool{true, false} {
		name := "noworker"
		if withWorker {
			name = "worker"
		}
		b.Run(name, func(b *testing.B) { benchUnkeyedCost(b, withWorker) })
	}
}

func benchUnkeyedCost(b *testing.B, withWorker bool) {
	const n, rounds = 40_000, 4
	db, redis, queue, ins := benchSetup(b)
	keyedQueue := queue + "_keyed"
	b.Cleanup(func() { _ = ins.DeleteQueue(keyedQueue, true) })
	ctx := context.Background()
	payload := `{"key":"","seq":0}`
	if withWorker {
		srv := asynq.NewServer(redis, asynq.Config{
			Queues: map[string]int{keyedQueue: 1}, Concurrency: 20, TaskCheckInterval: 10 * time.Millisecond,
			Logger: quietAsynqLogger{}, LogLevel: asynq.FatalLevel,
		})
		if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); err != nil {
			b.Fatal(err)
		}
		defer srv.Shutdown()
	}

	// drain inserts n rows, every tenth for the worker's queue (keyed over 100 keys when keyed), and runs
	// a relay until the other nine tenths are published.
	drain := func(keyed bool) (others int64, d time.Duration, cpuPerRow time.Duration) {
		keyExpr := "NULL"
		if keyed {
			keyExpr = "'k' || (i / 10 % 100)"
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO outbox_events (event_id, event_name, queue, payload, ordering_key)
SELECT gen_random_uuid(), 'bench.event', CASE WHEN i %% 10 = 0 THEN ? ELSE ? END, ?, CASE WHEN i %% 10 = 0 THEN %s END
FROM generate_series(1, ?) i`, keyExpr), keyedQueue, queue, payload, n); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "VACUUM ANALYZE outbox_events"); err != nil {
			b.Fatal(err)
		}
		others = outboxtest.Count(b, db, "outbox_events", "queue = ?", queue)
		r, err := New(db, redis, Config{DisableNotify: true, PublishedRetention: -1, Logger: outboxtest.Logger(b)})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		cpu0 := readCPU().self
		start := time.Now()
		go func() { done <- r.Run(runCtx) }()
		for outboxtest.CountUndelivered(b, db, "queue = ?", queue) > 0 {
			time.Sleep(5 * time.Millisecond) // a poll step of the measurement, the same in both arms
		}
		d = time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		cpuPerRow = (readCPU().self - cpu0) / time.Duration(outboxtest.CountDelivered(b, db, ""))
		_ = r.Close()
		if _, err := db.ExecContext(ctx, "TRUNCATE outbox_events"); err != nil {
			b.Fatal(err)
		}
		_ = ins.DeleteQueue(queue, true)
		_ = ins.DeleteQueue(keyedQueue, true)
		return others, d, cpuPerRow
	}
	for range b.N {
		var plainN, keyedN int64
		var plainD, keyedD, plainCPU, keyedCPU time.Duration
		for round := range rounds {
			for arm := range 2 {
				if (arm+round)%2 == 0 { // ABBA: both arms go first as often
					u, d, c := drain(false)
					plainN, plainD, plainCPU = plainN+u, plainD+d, plainCPU+c
				} else {
					u, d, c := drain(true)
					keyedN, keyedD, keyedCPU = keyedN+u, keyedD+d, keyedCPU+c
				}
			}
		}
		plain, keyed := float64(plainN)/plainD.Seconds(), float64(keyedN)/keyedD.Seconds()
		b.ReportMetric(plain, "plain_unkeyed/s")
		b.ReportMetric(keyed, "keyed10_unkeyed/s")
		b.ReportMetric(keyed/plain, "keyed10/plain")
		// The CPU of this process (the relay, and the worker when there is one) per published row.
		b.ReportMetric(float64(plainCPU.Microseconds())/rounds, "plain_cpu_us/row")
		b.ReportMetric(float64(keyedCPU.Microseconds())/rounds, "keyed10_cpu_us/row")
	}
}
