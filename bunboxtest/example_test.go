package bunboxtest_test

import (
	"context"
	"fmt"
	"os"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunboxtest"
	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/model"
)

// CheckoutService is service code that emits events through a bunx.Dispatcher.
type CheckoutService struct {
	Events bunx.Dispatcher
}

// Checkout emits order.placed.
func (s *CheckoutService) Checkout(ctx context.Context, orderID int) error {
	ev, err := model.NewEvent("order.placed", map[string]int{"order_id": orderID})
	if err != nil {
		return err
	}
	return s.Events.Dispatch(ctx, ev)
}

// A unit test of service code: the Dispatcher keeps what the service dispatched, with no database.
func ExampleDispatcher() {
	var events bunboxtest.Dispatcher
	svc := &CheckoutService{Events: &events}
	if err := svc.Checkout(context.Background(), 42); err != nil {
		panic(err)
	}
	for _, ev := range events.Events("order.placed") {
		fmt.Println(ev.Name, string(ev.Payload))
	}
	// Output: order.placed {"order_id":42}
}

// Read the events a transaction wrote, before it commits.
func ExampleEvents() {
	ctx := context.Background()
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ob := bunx.New(db)

	_ = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		ev, err := model.NewEvent("order.placed", map[string]int{"order_id": 7})
		if err != nil {
			return err
		}
		if err := ob.Record(ctx, tx, ev); err != nil {
			return err
		}
		evs, err := bunboxtest.Events(ctx, tx, "order.placed")
		if err != nil {
			return err
		}
		fmt.Println(len(evs), evs[0].Name, string(evs[0].Payload))
		return fmt.Errorf("roll back: the example leaves nothing behind")
	})
	// Output: 1 order.placed {"order_id": 7}
}

// Hand what committed to the worker's handlers, synchronously, without a relay or Redis.
func ExampleDrain() {
	ctx := context.Background()
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ev, err := model.NewEvent("invoice.sent", map[string]string{"invoice": "F-1"})
	if err != nil {
		panic(err)
	}
	if err := bunx.New(db).Record(ctx, db, ev); err != nil {
		panic(err)
	}

	mux := asynq.NewServeMux() // the worker's
	mux.HandleFunc("invoice.sent", func(ctx context.Context, t *asynq.Task) error {
		fmt.Println("handled", t.Type(), string(t.Payload()))
		return nil
	})
	n, err := bunboxtest.Drain(ctx, db, mux)
	fmt.Println(n, err)
	// Output:
	// handled invoice.sent {"invoice": "F-1"}
	// 1 <nil>
}
