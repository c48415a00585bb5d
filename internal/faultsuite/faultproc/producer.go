package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/model"
)

// Order is the producer's business row. Inserting one records its order.placed event through the
// bunx hooks, in the insert's transaction.
type Order struct {
	bun.BaseModel `bun:"table:orders"`
	bunx.Hooks    `bun:"-"`

	ID     uuid.UUID `bun:"id,pk,type:uuid"`
	TxNo   int64     `bun:"tx_no,notnull"`
	Amount int64     `bun:"amount,notnull"`

	// PlacedID is the id of the order's order.placed event, chosen here so that the ledger knows it
	// before the transaction commits.
	PlacedID uuid.UUID `bun:"-"`
}

// Routes fans order.audited out to two listeners, for the relays, their reconcilers and the workers.
var Routes = fanout.Routes{EventAudited: {"ledger", "notify"}}

// Event names of the suite. order.unrouted has no handler: the workers archive it. account.changed
// carries the ordering key of its account (model.WithOrderingKey).
const (
	EventPlaced   = "order.placed"
	EventAudited  = "order.audited"
	EventUnrouted = "order.unrouted"
	EventAccount  = "account.changed"
	QueueCritical = "critical"
)

// Accounts is how many accounts the keyed transactions change (rows acct-0... of fault_accounts).
const Accounts = 8

// AccountChanged is the payload of account.changed: the account's sequence number, which the
// transaction took by incrementing fault_accounts.seq, so that the committed events of an account are
// numbered 1, 2, 3... in commit order.
type AccountChanged struct {
	Account string `json:"account"`
	Seq     int64  `json:"seq"`
}

var errRollback = errors.New("rolled back on purpose")

// plannedEvent is one event of a planned transaction.
type plannedEvent struct {
	id   uuid.UUID
	name string
}

// runProducer places orders until -duration has passed or it is told to stop. Shapes, chosen at random:
// one order; a slice insert of several orders (one event each, from the hook); an order plus explicitly
// recorded audit events on another queue; an order plus an event nobody listens to. Some transactions of
// every shape are rolled back on purpose. Each transaction's outcome goes to producer.log:
//
//	tx <no> committed|rolledback|failed <shape> <event id>:<name>,...
//
// "failed" is an error from PostgreSQL (e.g. it was restarted): the commit may or may not have happened;
// the checker decides by looking for the transaction's orders.
func runProducer(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("producer", flag.ExitOnError)
	c.register(fs)
	duration := fs.Duration("duration", 30*time.Second, "how long to produce")
	rate := fs.Float64("rate", 40, "transactions per second, all goroutines together")
	writers := fs.Int("writers", 4, "concurrent writers")
	sabotage := fs.String("break", "", "sabotage, to prove the suite notices: ordering (account events without their ordering key)")
	_ = fs.Parse(args)
	log := logger("producer")

	led, err := openLedger(c.dir + "/producer.log")
	if err != nil {
		return err
	}
	defer led.close()
	db := openDB(c.db, *writers+2)
	defer db.Close()
	ob := bunx.New(db)
	bunx.OnInsert(ob, func(ctx context.Context, o *Order) ([]*model.Event, error) {
		ev, err := model.NewEvent(EventPlaced, map[string]any{"order_id": o.ID, "amount": o.Amount}, model.WithEventID(o.PlacedID))
		return []*model.Event{ev}, err
	})

	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var txNo atomic.Int64
	var counts [3]atomic.Int64 // committed, rolled back, failed
	var wg sync.WaitGroup
	interval := time.Duration(float64(*writers) / *rate * float64(time.Second))
	for w := range *writers {
		rng := rand.New(rand.NewPCG(uint64(c.seed), uint64(w)))
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				no := txNo.Add(1)
				shape, events, fn := planTx(rng, ob, no, *sabotage == "ordering")
				// The transaction must not be cut by the end of the run: a cancelled context would turn
				// into a rollback that the ledger would call a failure.
				err := db.RunInTx(context.WithoutCancel(ctx), nil, fn)
				outcome := "committed"
				switch {
				case errors.Is(err, errRollback):
					outcome = "rolledback"
					counts[1].Add(1)
				case err != nil:
					outcome = "failed"
					counts[2].Add(1)
					log.Warn("transaction failed", slog.Int64("tx", no), slog.Any("err", err))
				default:
					counts[0].Add(1)
				}
				parts := make([]string, len(events))
				for i, e := range events {
					parts[i] = e.id.String() + ":" + e.name
				}
				led.printf("tx %d %s %s %s", no, outcome, shape, strings.Join(parts, ","))
			}
		})
	}
	wg.Wait()
	fmt.Printf("producer: %d committed, %d rolled back, %d failed\n", counts[0].Load(), counts[1].Load(), counts[2].Load())
	return nil
}

// planTx draws the shape of transaction no and returns it with its events and its body.
func planTx(rng *rand.Rand, ob *bunx.Outbox, no int64, noKey bool) (string, []plannedEvent, func(context.Context, bun.Tx) error) {
	newOrder := func() *Order {
		return &Order{ID: uuid.New(), TxNo: no, Amount: rng.Int64N(10000) + 1, PlacedID: mustV7()}
	}
	var (
		shape   string
		orders  []*Order
		extra   []*model.Event
		account string    // keyed: the account whose sequence the transaction takes
		keyedID uuid.UUID // and the id of its account.changed event
	)
	switch p := rng.IntN(100); {
	case p < 35:
		shape = "single"
		orders = []*Order{newOrder()}
	case p < 55:
		shape = "keyed"
		orders = []*Order{newOrder()}
		account = fmt.Sprintf("acct-%d", rng.IntN(Accounts))
		keyedID = mustV7()
	case p < 72:
		shape = "slice"
		for range 2 + rng.IntN(4) {
			orders = append(orders, newOrder())
		}
	case p < 95:
		shape = "multi"
		orders = []*Order{newOrder()}
		for i := range 1 + rng.IntN(3) {
			ev, err := model.NewEvent(EventAudited, map[string]any{"order_id": orders[0].ID, "step": i},
				model.WithQueue(QueueCritical), model.WithMetadata("tx", fmt.Sprint(no)))
			if err != nil {
				panic(err)
			}
			extra = append(extra, ev)
		}
	default:
		shape = "unrouted"
		orders = []*Order{newOrder()}
		ev, err := model.NewEvent(EventUnrouted, map[string]any{"order_id": orders[0].ID})
		if err != nil {
			panic(err)
		}
		extra = append(extra, ev)
	}
	rollback := rng.IntN(100) < 12
	if rollback {
		shape += "+rollback"
	}
	var events []plannedEvent
	for _, o := range orders {
		events = append(events, plannedEvent{o.PlacedID, EventPlaced})
	}
	for _, ev := range extra {
		events = append(events, plannedEvent{ev.EventID, ev.Name})
	}
	if account != "" {
		events = append(events, plannedEvent{keyedID, EventAccount})
	}
	fn := func(ctx context.Context, tx bun.Tx) error {
		var err error
		if account != "" {
			// The transaction serializes on the account's row before it records the event, so the
			// outbox id order of the account's events is their commit order.
			var seq int64
			if err := tx.NewRaw("UPDATE fault_accounts SET seq = seq + 1 WHERE id = ? RETURNING seq", account).Scan(ctx, &seq); err != nil {
				return err
			}
			opts := []model.Option{model.WithEventID(keyedID)}
			if !noKey {
				opts = append(opts, model.WithOrderingKey(account))
			}
			ev, err := model.NewEvent(EventAccount, AccountChanged{Account: account, Seq: seq}, opts...)
			if err != nil {
				return err
			}
			if err := ob.Record(ctx, tx, ev); err != nil {
				return err
			}
		}
		if len(orders) == 1 {
			_, err = tx.NewInsert().Model(orders[0]).Exec(ctx)
		} else {
			_, err = tx.NewInsert().Model(&orders).Exec(ctx)
		}
		if err != nil {
			return err
		}
		if len(extra) > 0 {
			if err := ob.Record(ctx, tx, extra...); err != nil {
				return err
			}
		}
		if rollback {
			return errRollback
		}
		return nil
	}
	return shape, events, fn
}

func mustV7() uuid.UUID {
	id, err := uuid.NewV7()
	if err != nil {
		panic(err)
	}
	return id
}
