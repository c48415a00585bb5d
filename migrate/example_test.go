package migrate_test

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
	bunmigrate "github.com/uptrace/bun/migrate"

	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// Up applies bunbox's schema with its own migration tables; call it on start.
func ExampleUp() {
	var db *bun.DB // your database
	if err := bunboxmigrate.Up(context.Background(), db); err != nil {
		fmt.Println(err)
	}
}

// Register merges bunbox's migrations into the application's, for one migrator.
func ExampleRegister() {
	appMigrations := bunmigrate.NewMigrations()
	if err := bunboxmigrate.Register(appMigrations); err != nil {
		panic(err)
	}
	for _, m := range appMigrations.Sorted() {
		fmt.Println(m.Name, m.Comment)
	}
	// Output:
	// 20261129000001 bunbox_outbox_events
	// 20261129000003 bunbox_inbox
	// 20261201000003 bunbox_delivery_options
	// 20261201000004 bunbox_ordering
}
