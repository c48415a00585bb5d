package outboxtest

import (
	"context"
	"testing"

	"github.com/uptrace/bun"

	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// TenantSchema returns a fresh schema name, prefix followed by random hex digits, migrated into db with
// bunboxmigrate.WithSchema (which creates it; no search_path involved, so it works in the pooler pass as in
// the direct one), and drops the schema when the test ends.
func TenantSchema(tb testing.TB, db *bun.DB, prefix string) string {
	tb.Helper()
	name := RandomName(prefix)
	tb.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`); err != nil {
			tb.Logf("drop schema %s: %v", name, err)
		}
	})
	if err := bunboxmigrate.Up(context.Background(), db, bunboxmigrate.WithSchema(name)); err != nil {
		tb.Fatalf("migrate schema %s: %v", name, err)
	}
	return name
}
