package shop_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/example/shop"
	"github.com/bunbox/bunbox/relay"
)

// The whole shop in one process: migrate, register the hook, run the relay and the worker, serve the API.
// (Compile-only: it needs PostgreSQL and Redis, and runs until interrupted.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{}) // e.g. ...?sslmode=verify-full
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := shop.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	shop.Register(db, "default") // every Order insert now writes order.placed in its transaction

	redis, err := connect.Redis(os.Getenv("REDIS_URL")) // e.g. redis://:password@127.0.0.1:6379/0
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(db, redis, relay.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	go r.Run(ctx)
	go shop.RunWorker(ctx, redis, db, shop.WorkerConfig{})

	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: shop.Handler(db, nil)}
	go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// PlaceOrder commits the order, its lines and its order.placed event together.
func ExamplePlaceOrder() {
	ctx := context.Background()
	var db *bun.DB // opened, migrated, and shop.Register(db, queue) called at startup

	order, err := shop.PlaceOrder(ctx, db, shop.PlaceOrderRequest{
		Customer: "ada@example.com",
		Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 2, PriceCents: 450}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(order.ID, order.TotalCents)
}

// InsertOrder joins a transaction of the caller's: when it rolls back, the order and its event are gone.
func ExampleInsertOrder() {
	ctx := context.Background()
	var db *bun.DB

	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := shop.InsertOrder(ctx, tx, shop.PlaceOrderRequest{
			Customer: "ada@example.com",
			Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 1, PriceCents: 450}},
		}); err != nil {
			return err
		}
		return errors.New("payment declined") // rolls back: no order, no order.placed, no confirmation
	})
	fmt.Println(err)
}

func ExamplePlaceOrderRequest_Validate() {
	req := shop.PlaceOrderRequest{
		Customer: "ada@example.com",
		Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 0, PriceCents: 450}},
	}
	fmt.Println(req.Validate())
	// Output: shop: invalid order: lines[0].quantity must be between 1 and 1000
}
