package bunx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// TestWritesThroughPooler is the write path behind PgBouncer in transaction mode with default_pool_size 2,
// on the driver of BUNBOX_TEST_DRIVER (pgx in simple protocol, what pgx users behind PgBouncer before 1.21
// set): 6 writers × 150 business transactions, each inserting an order (whose OnInsert hook writes
// order.placed) and recording 1–3 events with a random queue, an ordering key or a group, a max retry and
// metadata. With the default Outbox no transaction fails, and every committed event's row holds exactly
// what was written (none bound to another statement's columns, as the prepared INSERT was behind a
// pooler, whose statement names collide between clients on a shared server connection).
func TestWritesThroughPooler(t *testing.T) {
	t.Parallel()
	outboxtest.RequirePooler(t)
	ctx := context.Background()
	name := outboxtest.NewDatabase(t)
	db := outboxtest.OpenPooled(t, name, nil)
	require.NoError(t, bunboxmigrate.Up(ctx, db))
	_, err := db.NewCreateTable().Model((*Order)(nil)).Exec(ctx)
	require.NoError(t, err)

	ob := bunx.New(db)
	bunx.OnInsert(ob, func(_ context.Context, o *Order) ([]*model.Event, error) {
		ev, err := model.NewEvent("order.placed", orderEvent{ID: o.ID, Ref: o.Ref}, model.WithQueue("orders"))
		return []*model.Event{ev}, err
	})

	const writers, txs = 6, 150
	var failed atomic.Int64
	var mu sync.Mutex
	written := map[uuid.UUID]*model.Event{}
	hooked := map[string]bool{} // the refs of committed orders
	var errs sync.Map
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			queues := []string{"default", "critical", "bulk", "q-" + fmt.Sprint(w)}
			for i := range txs {
				ref := fmt.Sprintf("pooled-%d-%d-%s", w, i, uuid.NewString()[:8])
				n := 1 + rnd.IntN(3)
				evs := make([]*model.Event, n)
				for j := range evs {
					opts := []model.Option{model.WithQueue(queues[rnd.IntN(len(queues))]),
						model.WithMetadata("writer", fmt.Sprint(w)), model.WithMetadata("tx", fmt.Sprint(i))}
					switch rnd.IntN(3) {
					case 0:
						opts = append(opts, model.WithOrderingKey(fmt.Sprintf("key-%d", rnd.IntN(20))))
					case 1:
						opts = append(opts, model.WithGroup(fmt.Sprintf("group-%d", rnd.IntN(5))))
					}
					if rnd.IntN(2) == 0 {
						opts = append(opts, model.WithMaxRetry(rnd.IntN(10)))
					}
					ev, err := model.NewEvent(fmt.Sprintf("noted.%d", rnd.IntN(4)), map[string]any{"w": w, "i": i, "j": j, "ref": ref}, opts...)
					if err != nil {
						t.Error(err)
						return
					}
					evs[j] = ev
				}
				err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					if _, err := tx.NewInsert().Model(&Order{Ref: ref}).Exec(ctx); err != nil {
						return err
					}
					return ob.Record(ctx, tx, evs...)
				})
				if err != nil {
					failed.Add(1)
					errs.Store(err.Error(), true)
					continue
				}
				mu.Lock()
				for _, ev := range evs {
					written[ev.EventID] = ev
				}
				hooked[ref] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	errs.Range(func(k, _ any) bool { t.Logf("failed transaction: %v", k); return true })

	// Every committed event, read back directly and compared column by column with what was written.
	var rows []model.Event
	require.NoError(t, outboxtest.OpenDirectDB(t, name).NewSelect().Model(&rows).Scan(ctx))
	misbound, checked, placed := 0, 0, 0
	for _, row := range rows {
		if row.Name == "order.placed" {
			var p orderEvent
			require.NoError(t, json.Unmarshal(row.Payload, &p))
			if !hooked[p.Ref] || row.Queue != "orders" || p.ID == 0 {
				misbound++
				t.Errorf("hook event %s: %+v", row.EventID, row)
			}
			placed++
			continue
		}
		ev, ok := written[row.EventID]
		if !ok {
			misbound++
			t.Errorf("a row no committed transaction wrote: %+v", row)
			continue
		}
		checked++
		want := []any{ev.Name, ev.Queue, ev.OrderingKey, ev.Group, ev.MaxRetry, ev.Metadata}
		got := []any{row.Name, row.Queue, row.OrderingKey, row.Group, row.MaxRetry, row.Metadata}
		if !jsonEqual(ev.Payload, row.Payload) || fmt.Sprint(deref(want)) != fmt.Sprint(deref(got)) {
			misbound++
			t.Errorf("event %s: wrote %v %s, the row holds %v %s", ev.EventID, deref(want), ev.Payload, deref(got), row.Payload)
		}
	}
	t.Logf("through PgBouncer (transaction mode, pool size 2), driver %s: %d transactions, %d failed; "+
		"%d recorded events checked column by column, %d hook events; %d misbound",
		driverName(), writers*txs, failed.Load(), checked, placed, misbound)
	require.Zero(t, failed.Load(), "failed business transactions")
	require.Zero(t, misbound, "misbound events")
	require.Equal(t, len(written), checked, "every recorded event committed once")
	require.Equal(t, len(hooked), placed, "one order.placed per committed order")
	require.Equal(t, writers*txs, placed)
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// deref replaces the *int of MaxRetry by its value, or "nil".
func deref(vals []any) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		if p, ok := v.(*int); ok {
			if p == nil {
				out[i] = "nil"
			} else {
				out[i] = *p
			}
			continue
		}
		out[i] = v
	}
	return out
}

func driverName() string {
	d, _ := outboxtest.Driver()
	return d
}
