package bunx_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/bunx"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// bun over pgx's database/sql driver works like bun over pgdriver: errors are read by SQLSTATE and
// constraint name, so an event id already in the outbox is a *bunx.DuplicateEventError either way.
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
	var dup *bunx.DuplicateEventError
	fmt.Println(errors.As(err, &dup) && dup.EventID == ev.EventID)
	// Output: true
}

// An InboxCleaner keeps inbox_events from growing forever. Run it next to the asynq worker; its Window
// must outlast the time asynq may deliver a task again (about 21 days with asynq's defaults) and the time
// the relay's reconciler may enqueue it again (25h with the relay's defaults).
func ExampleInboxCleaner() {
	ctx, cancel := context.WithCancel(context.Background())
	db := exampleDB(ctx) // the worker's database
	defer db.Close()
	inbox := bunx.NewInbox(db)
	cleaner, err := bunx.NewInboxCleaner(inbox, bunx.InboxCleanerConfig{
		MaxRetry:    5,                // the largest model.WithMaxRetry of the handled events
		TaskTimeout: 10 * time.Minute, // the largest model.WithTimeout of the handled events
		Window:      72 * time.Hour,   // refused if shorter than cleaner.Config().MinWindow()
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("shortest Window:", cleaner.Config().MinWindow())
	stopped := make(chan error, 1)
	go func() { stopped <- cleaner.Run(ctx) }() // a pass every Interval until ctx is done

	cancel() // the worker shuts down
	fmt.Println(<-stopped)
	// Output:
	// shortest Window: 25h0m0s
	// <nil>
}
