package outboxtest

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/uptrace/bun"
)

// bookkeeping lists the migration tools' own tables, which SchemaFingerprint leaves out: bun's migrate
// (bunbox's and the application's), goose and golang-migrate.
const bookkeeping = "('bunbox_migrations', 'bunbox_migration_locks', 'bun_migrations', 'bun_migration_locks', 'goose_db_version', 'schema_migrations')"

// SchemaFingerprint describes the schema db works in (its search_path's first schema): every column,
// index, constraint, function and trigger, one per line and sorted, leaving out the migration tools' own
// tables. Two schemas with one fingerprint are the same to bunbox, however they were migrated.
func SchemaFingerprint(tb testing.TB, db bun.IDB) string {
	tb.Helper()
	ctx := context.Background()
	queries := []string{
		`SELECT table_name || '.' || column_name || ' ' || data_type || ' null=' || is_nullable || ' default=' || coalesce(column_default, '-')
		   || ' identity=' || is_identity
		 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name NOT IN ` + bookkeeping,
		`SELECT tablename || ': ' || replace(indexdef, current_schema() || '.', '')
		 FROM pg_indexes WHERE schemaname = current_schema() AND tablename NOT IN ` + bookkeeping,
		`SELECT conrelid::regclass::text || '.' || conname || ': ' || pg_get_constraintdef(oid) || ' validated=' || convalidated
		 FROM pg_constraint WHERE connamespace = current_schema()::regnamespace AND conrelid::regclass::text NOT IN ` + bookkeeping,
		`SELECT proname || ': ' || md5(prosrc) FROM pg_proc WHERE pronamespace = current_schema()::regnamespace`,
		`SELECT tgrelid::regclass::text || '.' || tgname FROM pg_trigger WHERE NOT tgisinternal
		 AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace)`,
	}
	var lines []string
	for _, q := range queries {
		var rows []string
		if err := db.NewRaw(q).Scan(ctx, &rows); err != nil {
			tb.Fatalf("read the schema: %v", err)
		}
		lines = append(lines, rows...)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
