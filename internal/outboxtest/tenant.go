package outboxtest

import (
	"context"
	"testing"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// TenantSchema returns a fresh schema name, prefix followed by random hex digits, migrated into db with
// bunboxmigrate.WithLocation (which creates it; no search_path involved, so it works in the pooler pass as in
// the direct one), and drops the schema when the test ends.
func TenantSchema(tb testing.TB, db *bun.DB, prefix string) string {
	tb.Helper()
	name := RandomName(prefix)
	tb.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`); err != nil {
			tb.Logf("drop schema %s: %v", name, err)
		}
	})
	if err := migrateUp(context.Background(), db, model.Location{Schema: name}); err != nil {
		tb.Fatalf("migrate schema %s: %v", name, err)
	}
	return name
}

// TenantTables migrates into db the outbox whose tables are named with prefix in schema
// (bunboxmigrate.WithLocation of that Schema and TablePrefix; schema "" is the one search_path finds, so use it only outside the
// pooler pass), and drops its tables when the test ends (the schema's own cleanup may drop them first).
func TenantTables(tb testing.TB, db *bun.DB, schema, prefix string) {
	tb.Helper()
	q := func(name string) string {
		if schema == "" {
			return prefix + name
		}
		return `"` + schema + `".` + prefix + name
	}
	tb.Cleanup(func() {
		for _, name := range []string{"outbox_events", "inbox_events", "bunbox_leases", "bunbox_migrations", "bunbox_migration_locks"} {
			if _, err := db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+q(name)+" CASCADE"); err != nil {
				tb.Logf("drop %s: %v", q(name), err)
			}
		}
		if _, err := db.ExecContext(context.Background(), "DROP FUNCTION IF EXISTS "+q("bunbox_outbox_notify")+"()"); err != nil {
			tb.Logf("drop the notify function: %v", err)
		}
	})
	if err := migrateUp(context.Background(), db, model.Location{Schema: schema, TablePrefix: prefix}); err != nil {
		tb.Fatalf("migrate %s: %v", q("outbox_events"), err)
	}
}
