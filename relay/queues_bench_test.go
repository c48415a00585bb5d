package relay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkQueuesDrain drains a backlog of 100,000 bulk events with the default Config and with
// Queues{critical: 6, bulk: 1}, side by side (the arms alternate, one drain each per round, each in a
// fresh schema), while 20 critical events are committed behind the backlog, one each time another
// 4,000 bulk events reached Redis. It reports each arm's drain rate (median of the rounds), the ratio of
// Queues to FIFO per round, and the critical events' commit-to-enqueue latency over all rounds of each
// arm (p50, p99, max). QUEUES_BENCH_BACKLOG, QUEUES_BENCH_ROUNDS (default 3) resize it:
//
//	go test -run '^$' -bench BenchmarkQueuesDrain -benchtime 1x -v ./relay/
func BenchmarkQueuesDrain(b *testing.B) {
	backlog := envInt(b, "QUEUES_BENCH_BACKLOG", 100_000)
	rounds := envInt(b, "QUEUES_BENCH_ROUNDS", 3)
	const criticals = 20
	spacing := backlog / (criticals + 5)
	type arm struct {
		name      string
		queues    bool
		rates     []float64
		latencies []time.Duration
		between   []int64
	}
	arms := []*arm{{name: "fifo"}, {name: "queues", queues: true}}
	for range b.N {
		for round := range rounds {
			order := arms
			if round%2 == 1 {
				order = []*arm{arms[1], arms[0]}
			}
			for _, a := range order {
				db, redis, queue, ins := benchSetup(b)
				critical, bulk := queue+"_critical", queue+"_bulk"
				ctx := context.Background()
				if _, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload, metadata)
SELECT gen_random_uuid(), 'bulk.event', ?, '{"order_id":12345,"total":"99.90"}', '{}' FROM generate_series(1, ?)`, bulk, backlog); err != nil {
					b.Fatal(err)
				}
				if _, err := db.ExecContext(ctx, "VACUUM ANALYZE outbox_events"); err != nil {
					b.Fatal(err)
				}
				client, rdb, err := newClient(redis) // the relay's own: auto-pipelined
				if err != nil {
					b.Fatal(err)
				}
				enq := &queueEnqueuer{Enqueuer: client, watch: critical}
				cfg := Config{Enqueuer: enq, DisableNotify: true, DisableReconciler: true, PublishedRetention: -1}
				if a.queues {
					cfg.Queues = map[string]int{critical: 6, bulk: 1}
				}
				r, err := New(db, redis, cfg)
				if err != nil {
					b.Fatal(err)
				}
				res := measureCritical(b, db, r, enq, critical, criticals, spacing, backlog)
				rate := float64(backlog) / res.drained.Seconds()
				a.rates = append(a.rates, rate)
				a.latencies = append(a.latencies, res.latencies...)
				a.between = append(a.between, res.between...)
				b.Logf("round %d, %s: %.0f events/s; critical events: %s", round, a.name, rate, res.summary())
				_ = r.Close()
				_ = rdb.Close()
				for _, q := range []string{critical, bulk} {
					_ = ins.DeleteQueue(q, true)
				}
			}
		}
	}
	for _, a := range arms {
		b.ReportMetric(median(a.rates), a.name+"-events/s")
		s := slices.Sorted(slices.Values(a.latencies))
		pct := func(p float64) float64 {
			return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
		}
		b.ReportMetric(pct(0.5), a.name+"-critical-p50-ms")
		b.ReportMetric(pct(0.99), a.name+"-critical-p99-ms")
		b.ReportMetric(float64(s[len(s)-1].Microseconds())/1000, a.name+"-critical-max-ms")
		b.Logf("%s: drain %s events/s; critical commit to enqueue %s; bulk events enqueued meanwhile: median %d, max %d",
			a.name, fmtRates(a.rates), criticalRun{latencies: a.latencies}.summary(),
			slices.Sorted(slices.Values(a.between))[len(a.between)/2], slices.Max(a.between))
	}
	ratios := make([]float64, len(arms[0].rates))
	for i := range ratios {
		ratios[i] = arms[1].rates[i] / arms[0].rates[i]
	}
	b.ReportMetric(median(ratios), "queues/fifo")
	b.Logf("queues/fifo drain rate by round: %s", fmtRates(ratios))
}

// median is the median of xs (the upper one of an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

func fmtRates(xs []float64) string {
	var s string
	for i, x := range xs {
		if i > 0 {
			s += ", "
		}
		if x < 10 {
			s += fmt.Sprintf("%.3f", x)
		} else {
			s += fmt.Sprintf("%.0f", x)
		}
	}
	return s
}
