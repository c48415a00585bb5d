package bunx_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// PlainOrder is Order without hooks: the baseline.
type PlainOrder struct {
	bun.BaseModel `bun:"table:orders"`

	ID     int64  `bun:",pk,autoincrement"`
	Ref    string `bun:",unique,notnull"`
	Status string `bun:",notnull,default:'new'"`
}

// BenchmarkOutboxCost measures what the outbox costs the business transaction: "insert one order in
// RunInTx" without an event (a database with no Outbox bound, the model without hooks) and with its
// order.placed event written by the hook. The two alternate inside every iteration, so both see the same
// machine, and the benchmark reports each one's transactions per second and their ratio:
//
//	go test -run '^$' -bench OutboxCost -benchtime 3000x ./bunx/
func BenchmarkOutboxCost(b *testing.B) {
	for _, writers := range []int{1, 8} {
		b.Run(map[int]string{1: "Sequential", 8: "Writers8"}[writers], func(b *testing.B) {
			plainDB, _ := outboxtest.Schema(b)
			hookDB, _ := outboxtest.Schema(b)
			ctx := context.Background()
			for _, db := range []*bun.DB{plainDB, hookDB} {
				db.SetMaxOpenConns(writers + 2)
				db.SetMaxIdleConns(writers + 2)
				if _, err := db.NewCreateTable().Model((*Order)(nil)).Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			ob := bunx.New(hookDB)
			bunx.OnInsert(ob, func(_ context.Context, o *Order) ([]*model.Event, error) {
				ev, err := model.NewEvent("order.placed", orderEvent{ID: o.ID, Ref: o.Ref})
				return []*model.Event{ev}, err
			})

			var seq atomic.Int64
			var plainNs, hookNs atomic.Int64
			insert := func(db *bun.DB, m any) time.Duration {
				start := time.Now()
				if err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					_, err := tx.NewInsert().Model(m).Exec(ctx)
					return err
				}); err != nil {
					b.Error(err)
				}
				return time.Since(start)
			}
			ref := func() string { return strconv.FormatInt(seq.Add(1), 10) }

			// RunParallel starts GOMAXPROCS × parallelism goroutines.
			goroutines := 1
			if writers > 1 {
				b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
				goroutines = max(1, writers/runtime.GOMAXPROCS(0)) * runtime.GOMAXPROCS(0)
			}
			b.ResetTimer()
			round := func() {
				plainNs.Add(int64(insert(plainDB, &PlainOrder{Ref: ref()})))
				hookNs.Add(int64(insert(hookDB, &Order{Ref: ref()})))
			}
			if writers == 1 {
				for range b.N {
					round()
				}
			} else {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						round()
					}
				})
			}
			b.StopTimer()
			// Each goroutine spent plainNs/goroutines on plain transactions: that is their wall time.
			plainTPS := float64(b.N) * float64(goroutines) / time.Duration(plainNs.Load()).Seconds()
			hookTPS := float64(b.N) * float64(goroutines) / time.Duration(hookNs.Load()).Seconds()
			b.ReportMetric(plainTPS, "plain-tx/s")
			b.ReportMetric(hookTPS, "outbox-tx/s")
			b.ReportMetric(hookTPS/plainTPS, "ratio")
			if n := outboxtest.Count(b, hookDB, "outbox_events", ""); n != int64(b.N) {
				b.Fatalf("%d events for %d orders", n, b.N)
			}
		})
	}
}
