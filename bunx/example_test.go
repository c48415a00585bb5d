package bunx_test

import (
	"cmp"
	"context"
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
	db, err := connect.Postgres(ctx, // TLS as sslmode says: verify-full in production
		cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable"), connect.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		fmt.Println(err)
		return
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
	fmt.Println(err)
}

// Record writes events that no hook can see, such as those of a set-based update, in the caller's
// transaction.
func ExampleOutbox_Record() {
	ctx := context.Background()
	var db *bun.DB // your database
	ob := bunx.New(db)

	_ = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
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
}

// Service code takes a Dispatcher and a Transactor and knows nothing of the outbox.
func ExampleTransactor_WithinTransaction() {
	ctx := context.Background()
	var db *bun.DB // your database
	var events bunx.Dispatcher = bunx.New(db)
	txr := bunx.NewTransactor(db)

	_ = txr.WithinTransaction(ctx, func(ctx context.Context) error {
		if _, err := bunx.Conn(ctx, db).NewInsert().Model(&ShopOrder{Customer: "ada"}).Exec(ctx); err != nil {
			return err
		}
		ev, err := model.NewEvent("customer.welcomed", map[string]string{"customer": "ada"})
		if err != nil {
			return err
		}
		return events.Dispatch(ctx, ev) // joins the transaction in ctx
	})
}
