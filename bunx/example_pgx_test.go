package bunx_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/bunx"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// bun over pgx's database/sql driver works like bun over pgdriver: errors are read by SQLSTATE and
// constraint name, so an event id already in the outbox is a bunx.ErrDuplicateEvent naming the id either way.
func Example_pgx() {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	db := bun.NewDB(stdlib.OpenDB(*cfg), pgdialect.New())
	defer db.Close()
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	ob := bunx.New(db)

	ev, _ := model.NewEvent("order.placed", map[string]int{"order_id": 1})
	again, _ := model.NewEvent("order.placed", map[string]int{"order_id": 1}, model.WithEventID(ev.EventID))
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := ob.Record(ctx, tx, ev); err != nil {
			return err
		}
		return ob.Record(ctx, tx, again) // the same id again: the insert fails, the transaction rolls back
	})
	fmt.Println(errors.Is(err, bunx.ErrDuplicateEvent) && strings.Contains(err.Error(), ev.EventID.String()))
	// Output: true
}
