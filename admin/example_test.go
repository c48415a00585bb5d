package admin_test

import (
	"context"
	"fmt"
	"os"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/connect"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// The operator lists the dead events and, once the cause is fixed, puts them back in line.
func ExampleOutbox_RetryDead() {
	ctx := context.Background()
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	deadForExample(ctx, db) // for this example, an event the relay gave up on

	ob, err := admin.New(db, model.Location{}) // the Location bunx and the relay were given
	if err != nil {
		panic(err)
	}
	dead, err := ob.ListDead(ctx, 50)
	if err != nil {
		panic(err)
	}
	for _, ev := range dead {
		fmt.Println(ev.Name, ev.Attempts, ev.LastError)
		n, err := ob.RetryDead(ctx, ev.EventID)
		if err != nil {
			panic(err)
		}
		fmt.Println("revived:", n)
	}
	// Output:
	// invoice.send 25 smtp: 550 mailbox unavailable
	// revived: 1
}

// deadForExample records an event and marks it dead as the relay would after its last attempt.
func deadForExample(ctx context.Context, db *bun.DB) {
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		panic(err)
	}
	ev, err := model.NewEvent("invoice.send", nil)
	if err != nil {
		panic(err)
	}
	if err := bunx.New(db).Record(ctx, db, ev); err != nil {
		panic(err)
	}
	if _, err := db.NewUpdate().Table("outbox_events").
		Set("attempts = 25, last_error = 'smtp: 550 mailbox unavailable', dead_at = now(), published_at = NULL").
		Where("event_id = ?", ev.EventID).Exec(ctx); err != nil {
		panic(err)
	}
}
