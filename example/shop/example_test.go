package shop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/example/shop"
	"github.com/bunbox/bunbox/relay"
)

// The whole shop in one process: migrate, register the hook, run the relay and the worker, serve the API.
// An order placed through the API is confirmed by the worker. A service runs until it is told to stop
// (signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)); this example stops after one order.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
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
	done := make(chan error, 3)
	go func() { done <- r.Run(ctx) }()
	go func() { done <- shop.RunWorker(ctx, redis, db, shop.WorkerConfig{}) }()

	ln, err := net.Listen("tcp", "127.0.0.1:0") // a service listens on its port, e.g. :8080
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: shop.Handler(db, nil), ReadHeaderTimeout: 10 * time.Second}
	go func() { done <- srv.Serve(ln) }()

	resp, err := http.Post("http://"+ln.Addr().String()+"/orders", "application/json",
		strings.NewReader(`{"customer": "ada@example.com", "lines": [{"sku": "tea", "quantity": 2, "price_cents": 450}]}`))
	if err != nil {
		log.Fatal(err)
	}
	var order shop.Order
	err = json.NewDecoder(resp.Body).Decode(&order)
	_ = resp.Body.Close()
	fmt.Println(resp.Status, order.TotalCents, err)

	// The relay forwards order.placed, the worker handles it and writes the confirmation.
	var c shop.Confirmation
	tick, deadline := time.NewTicker(10*time.Millisecond), time.After(time.Minute)
	defer tick.Stop()
	for db.NewSelect().Model(&c).Where("order_id = ?", order.ID).Scan(ctx) != nil {
		select {
		case <-tick.C:
		case <-deadline:
			log.Fatal("no confirmation within a minute")
		}
	}
	fmt.Println("confirmed:", c.Customer, c.Deliveries)

	stop() // the relay and the worker stop with ctx; the server with Shutdown
	if err := srv.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}
	// Output:
	// 201 Created 900 <nil>
	// confirmed: ada@example.com 1
}

// PlaceOrder commits the order, its lines and its order.placed event together.
func ExamplePlaceOrder() {
	ctx := context.Background()
	db := exampleDB(ctx) // opened, migrated, and shop.Register(db, queue) called at startup
	defer db.Close()

	order, err := shop.PlaceOrder(ctx, db, shop.PlaceOrderRequest{
		Customer: "ada@example.com",
		Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 2, PriceCents: 450}},
	})
	if err != nil {
		log.Fatal(err)
	}
	n, err := db.NewSelect().Table("outbox_events").Where("event_name = ?", shop.EventOrderPlaced).
		Where("payload->>'order_id' = ?", fmt.Sprint(order.ID)).Count(ctx)
	fmt.Println(order.TotalCents, n, err)
	// Output: 900 1 <nil>
}

// InsertOrder joins a transaction of the caller's: when it rolls back, the order and its event are gone.
func ExampleInsertOrder() {
	ctx := context.Background()
	db := exampleDB(ctx)
	defer db.Close()

	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := shop.InsertOrder(ctx, tx, shop.PlaceOrderRequest{
			Customer: "bob@example.com",
			Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 1, PriceCents: 450}},
		}); err != nil {
			return err
		}
		return errors.New("payment declined") // rolls back: no order, no order.placed, no confirmation
	})
	fmt.Println(err)
	n, err := db.NewSelect().Model((*shop.Order)(nil)).Where("customer = ?", "bob@example.com").Count(ctx)
	fmt.Println("orders of bob:", n, err)
	// Output:
	// payment declined
	// orders of bob: 0 <nil>
}

func ExamplePlaceOrderRequest_Validate() {
	req := shop.PlaceOrderRequest{
		Customer: "ada@example.com",
		Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 0, PriceCents: 450}},
	}
	fmt.Println(req.Validate())
	// Output: shop: invalid order: lines[0].quantity must be between 1 and 1000
}

// exampleDB opens DATABASE_URL, migrated, with the shop's hook registered on queue "default".
func exampleDB(ctx context.Context) *bun.DB {
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := shop.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	shop.Register(db, "default")
	return db
}
