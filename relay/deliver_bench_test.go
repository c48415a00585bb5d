package relay

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// BenchmarkDeliver runs the relay's enqueue path alone: batches of 500 events made in memory go through
// deliver (the Concurrency bound, the publish span, the task mapping, the pipelined asynq client) into
// the dev Redis, with no database read or write. One op is one event: ns/op, B/op and allocs/op are per
// event, and cpu-µs/event is this process's CPU (getrusage) over the run, Redis's not included. Compare
// two builds with benchstat:
//
//	go test -run '^$' -bench Deliver -benchmem -count 6 ./relay/
func BenchmarkDeliver(b *testing.B) {
	outboxtest.SkipShort(b)
	db, redisOpt, queue, _ := benchSetup(b)
	r, err := New(db, redisOpt, Config{DisableNotify: true, DisableReconciler: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	ctx := context.Background()
	payload := []byte(`{"order_id":12345,"total":"99.90"}`)
	events := make([]model.Event, 500)
	b.ReportAllocs()
	cpu0 := readCPU().self // outside the timer: reading /proc allocates
	b.ResetTimer()
	for done := 0; done < b.N; done += len(events) {
		batch := events[:min(len(events), b.N-done)]
		now := time.Now()
		for i := range batch {
			batch[i] = model.Event{ID: int64(done + i + 1), EventID: uuid.New(), Name: "bench.event", Queue: queue,
				Payload: payload, CreatedAt: now}
		}
		for i, err := range r.deliverer.deliver(ctx, batch, nil, func(int64) {}) {
			if err != nil {
				b.Fatalf("event %d: %v", i, err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(readCPU().self-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/event")
}
