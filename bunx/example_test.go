package bunx_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/connect"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// ShopOrder is a business model: embedding bunx.Hooks is all it takes to emit events.
type ShopOrder struct {
	bun.BaseModel `bun:"table:shop_orders"`
	bunx.Hooks    `bun:"-"`

	ID       int64  `bun:",pk,autoincrement"`
	Customer string `bun:",notnull"`
}

// The three steps: register the model hooks, write the business row in RunInTx, run the relay
// (see the relay package). The event commits, or rolls back, with the order.
func Example() {
	ctx := context.Background()
	// TLS as sslmode says: ...?sslmode=verify-full in production.
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err) // the error shows the URL with its password masked
	}
	defer db.Close()
	if err := bunboxmigrate.Up(ctx, db); err != nil { // bunbox's schema
		panic(err)
	}
	if _, err := db.NewCreateTable().Model((*ShopOrder)(nil)).IfNotExists().Exec(ctx); err != nil { // the app's
		panic(err)
	}

	ob := bunx.New(db)
	bunx.OnInsert(ob, func(ctx context.Context, o *ShopOrder) ([]*model.Event, error) {
		ev, err := model.NewEvent("order.placed", map[string]any{"order_id": o.ID, "customer": o.Customer})
		return []*model.Event{ev}, err
	})

	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&ShopOrder{Customer: "ada"}).Exec(ctx)
		return err // the hook wrote order.placed in this same transaction
	})
	fmt.Println("committed:", err)
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&ShopOrder{Customer: "bob"}).Exec(ctx); err != nil {
			return err
		}
		return errors.New("payment declined") // rolls back the order and its event
	})
	fmt.Println("rolled back:", err)

	n, err := db.NewSelect().Table("outbox_events").Where("event_name = ?", "order.placed").Count(ctx)
	fmt.Println("order.placed events:", n, err)
	// Output:
	// committed: <nil>
	// rolled back: payment declined
	// order.placed events: 1 <nil>
}

// Record writes events that no hook can see, such as those of a set-based update, in the caller's
// transaction.
func ExampleOutbox_Record() {
	ctx := context.Background()
	db := exampleDB(ctx) // your database
	defer db.Close()
	ob := bunx.New(db)

	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewUpdate().Model((*ShopOrder)(nil)).
			Set("customer = 'anonymous'").Where("customer = ?", "deleted").Exec(ctx); err != nil {
			return err
		}
		ev, err := model.NewEvent("customers.anonymized", nil)
		if err != nil {
			return err
		}
		return ob.Record(ctx, tx, ev)
	})
	fmt.Println(err)

	n, err := db.NewSelect().Table("outbox_events").Where("event_name = ?", "customers.anonymized").Count(ctx)
	fmt.Println("customers.anonymized events:", n, err)
	// Output:
	// <nil>
	// customers.anonymized events: 1 <nil>
}

// Service code takes a Dispatcher and a Transactor and knows nothing of the outbox.
func ExampleTransactor_WithinTransaction() {
	ctx := context.Background()
	db := exampleDB(ctx) // your database
	defer db.Close()
	var events bunx.Dispatcher = bunx.New(db)
	txr := bunx.NewTransactor(db)

	err := txr.WithinTransaction(ctx, func(ctx context.Context) error {
		if _, err := bunx.TxOrDB(ctx, db).NewInsert().Model(&ShopOrder{Customer: "ada"}).Exec(ctx); err != nil {
			return err
		}
		ev, err := model.NewEvent("customer.welcomed", map[string]string{"customer": "ada"})
		if err != nil {
			return err
		}
		return events.Dispatch(ctx, ev) // joins the transaction in ctx
	})
	fmt.Println(err)

	n, err := db.NewSelect().Table("outbox_events").Where("event_name = ?", "customer.welcomed").Count(ctx)
	fmt.Println("customer.welcomed events:", n, err)
	// Output:
	// <nil>
	// customer.welcomed events: 1 <nil>
}

// exampleDB opens DATABASE_URL with bunbox's schema and the shop_orders table of these examples.
func exampleDB(ctx context.Context) *bun.DB {
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err)
	}
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		panic(err)
	}
	if _, err := db.NewCreateTable().Model((*ShopOrder)(nil)).IfNotExists().Exec(ctx); err != nil {
		panic(err)
	}
	return db
}
