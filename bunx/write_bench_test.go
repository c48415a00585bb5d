package bunx_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// BenchmarkWritePath runs "insert one order and write its event in RunInTx" one writer at a time, the
// event written by the OnInsert hook, by Record, and by a hand-written INSERT of the same columns, each in
// a database of its own. It is for profiles and allocation counts of the client's side of the write
// (bunbench's tax part gives the ratios that BENCHMARKS.md records). Besides the time per transaction it
// reports the CPU time the benchmark's process spent per transaction (cpu-µs/op): that is the client's
// share, which the write path can cut, while the server's share is the same statements in all three.
//
//	go test -run '^$' -bench WritePath -benchmem -cpuprofile /tmp/write.prof ./bunx/
func BenchmarkWritePath(b *testing.B) {
	ctx := context.Background()
	var seq atomic.Int64
	ref := func() string { return "w" + strconv.FormatInt(seq.Add(1), 10) }
	newDB := func(b *testing.B) *bun.DB {
		db, _ := outboxtest.Schema(b)
		if _, err := db.NewCreateTable().Model((*Order)(nil)).Exec(ctx); err != nil {
			b.Fatal(err)
		}
		return db
	}
	tx := func(b *testing.B, db *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) {
		if err := db.RunInTx(ctx, nil, fn); err != nil {
			b.Fatal(err)
		}
	}
	// orderTx inserts an order without hooks in a transaction and then writes its event with emit.
	orderTx := func(b *testing.B, db *bun.DB, emit func(ctx context.Context, tx bun.Tx, o *PlainOrder) error) {
		tx(b, db, func(ctx context.Context, tx bun.Tx) error {
			o := &PlainOrder{Ref: ref()}
			if _, err := tx.NewInsert().Model(o).Exec(ctx); err != nil {
				return err
			}
			return emit(ctx, tx, o)
		})
	}

	b.Run("hook", func(b *testing.B) {
		db := newDB(b)
		ob := bunx.New(db)
		bunx.OnInsert(ob, func(_ context.Context, o *Order) ([]*model.Event, error) {
			ev, err := model.NewEvent("order.placed", orderEvent{ID: o.ID, Ref: o.Ref})
			return []*model.Event{ev}, err
		})
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			tx(b, db, func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.NewInsert().Model(&Order{Ref: ref()}).Exec(ctx)
				return err
			})
		}
	})
	b.Run("Record", func(b *testing.B) {
		db := newDB(b)
		ob := bunx.New(db)
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			orderTx(b, db, func(ctx context.Context, tx bun.Tx, o *PlainOrder) error {
				ev, err := model.NewEvent("order.placed", orderEvent{ID: o.ID, Ref: o.Ref})
				if err != nil {
					return err
				}
				return ob.Record(ctx, tx, ev)
			})
		}
	})
	b.Run("hand-written", func(b *testing.B) {
		db := newDB(b)
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			orderTx(b, db, func(ctx context.Context, tx bun.Tx, o *PlainOrder) error {
				data, err := json.Marshal(orderEvent{ID: o.ID, Ref: o.Ref})
				if err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, "INSERT INTO outbox_events (event_id, event_name, queue, payload, metadata) VALUES (?, ?, ?, ?, '{}')",
					uuid.Must(uuid.NewV7()).String(), "order.placed", "default", string(data))
				return err
			})
		}
	})
}

// reportCPU returns a func that reports the process's CPU time (user and system) per iteration since the
// call, as cpu-µs/op.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
