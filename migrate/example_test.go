package migrate_test

import (
	"context"
	"fmt"
	"os"

	bunmigrate "github.com/uptrace/bun/migrate"

	"github.com/bunbox/bunbox/connect"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// Up applies bunbox's schema with its own migration tables; call it on start.
func ExampleUp() {
	ctx := context.Background()
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{}) // your database
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := bunboxmigrate.Up(ctx, db); err != nil { // applies what is missing; a no-op when up to date
		panic(err)
	}
	var exists bool
	err = db.NewRaw("SELECT to_regclass('outbox_events') IS NOT NULL").Scan(ctx, &exists)
	fmt.Println(exists, err)
	// Output: true <nil>
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
	// 20261202000001 bunbox_leases
	// 20261202000002 bunbox_cancel
	// 20261204000001 bunbox_payload_codec
	// 20261205000001 bunbox_stream
	// 20261206000001 bunbox_stream_marks
	// 20261207000001 bunbox_published_index
	// 20261208000001 bunbox_stream_cluster
	// 20261208000002 bunbox_schema_version
	// 20261209000001 bunbox_stream_default
	// 20261210000001 bunbox_stream_lanes
	// 20261211000001 bunbox_stream_positions
}
