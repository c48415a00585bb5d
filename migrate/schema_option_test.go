package migrate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// TestUpWithSchema migrates two schemas of one database (one named with uppercase letters, so quoted) with
// WithLocation, twice each, without search_path (so also through the pooler): each has every table and its
// own bookkeeping, the schema is the one Up builds through search_path, and Down of one leaves the other.
func TestUpWithSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.Open(t, nil)
	a := outboxtest.TenantSchema(t, db, "tenant_a_")
	b := outboxtest.TenantSchema(t, db, "Tenant_B_")

	for _, s := range []string{a, b} {
		require.NoError(t, bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: s})), "Up again into %s", s)
		for _, table := range []string{"outbox_events", "inbox_events", "bunbox_leases", "bunbox_migrations"} {
			var ok bool
			require.NoError(t, db.NewRaw("SELECT to_regclass(?) IS NOT NULL", `"`+s+`".`+table).Scan(ctx, &ok))
			require.True(t, ok, "%s.%s exists", s, table)
		}
		status, err := bunboxmigrate.Status(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: s}))
		require.NoError(t, err)
		require.NotEmpty(t, status)
		require.Len(t, status.Applied(), len(status), "every migration applied in %s", s)
	}
	var schemas int
	require.NoError(t, db.NewRaw("SELECT count(*) FROM pg_namespace WHERE nspname = ? OR nspname = ?", b, strings.ToLower(b)).Scan(ctx, &schemas))
	require.Equal(t, 1, schemas, "the uppercase name is quoted: one schema %q, no %q", b, strings.ToLower(b))

	if !outboxtest.Pooled() { // a fingerprint reads current_schema(), a session setting
		_, ref := upSchema(t)
		for _, s := range []string{a} { // SchemaFingerprint casts current_schema() to regnamespace, which folds case

			require.Equal(t, ref, schemaFingerprint(t, s), "schema %s is the one Up builds", s)
		}
	}

	require.NoError(t, bunboxmigrate.Down(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: a})))
	var left int
	require.NoError(t, db.NewRaw("SELECT count(*) FROM pg_tables WHERE schemaname = ? AND tablename IN ('outbox_events', 'inbox_events', 'bunbox_leases')", a).Scan(ctx, &left))
	require.Zero(t, left, "Down dropped the tables of %s", a)
	require.NoError(t, db.NewRaw("SELECT count(*) FROM pg_tables WHERE schemaname = ? AND tablename IN ('outbox_events', 'inbox_events', 'bunbox_leases')", b).Scan(ctx, &left))
	require.Equal(t, 3, left, "Down of %s left %s alone", a, b)
	require.NoError(t, bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: a})), "Up after Down")
}

// schemaFingerprint is the fingerprint of schema, read on a direct connection whose search_path is set to it.
func schemaFingerprint(t *testing.T, schema string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := outboxtest.OpenDirect(t, nil).Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET search_path TO "`+schema+`"`)
	require.NoError(t, err)
	fp := outboxtest.SchemaFingerprint(t, conn)
	require.NotEmpty(t, fp)
	return fp
}

// TestWithSchemaRefusesBadNames: a schema name bunbox cannot use safely fails the call with an error that
// names it, before any statement runs.
func TestWithSchemaRefusesBadNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.Unconnected(t) // nothing may reach the server
	for _, bad := range []string{`tenant"; DROP TABLE outbox_events; --`, "tenant'a", "1tenant", "pg_catalog", "a.b"} {
		err := bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: bad}))
		require.ErrorContains(t, err, "WithLocation: model: Location.Schema: invalid schema name", bad)
		require.ErrorContains(t, err, strings.ReplaceAll(bad, `"`, `\"`), "the error names the value")
		_, err = bunboxmigrate.SchemaSQL(bunboxmigrate.WithLocation(model.Location{Schema: bad}))
		require.Error(t, err)
	}
}

// TestSchemaSQLWithLocationAppliesTwice: `bunbox schema --schema NAME` applied twice with psql (one multi-statement
// query each) builds the schema Up builds there.
func TestSchemaSQLWithLocationAppliesTwice(t *testing.T) {
	t.Parallel()
	db := outboxtest.Open(t, nil)
	name := outboxtest.RandomName("tenant_sql_")
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`) })
	sql, err := bunboxmigrate.SchemaSQL(bunboxmigrate.WithLocation(model.Location{Schema: name}))
	require.NoError(t, err)
	require.Contains(t, sql, `CREATE SCHEMA IF NOT EXISTS "`+name+`"`)
	require.Contains(t, sql, `CREATE TABLE IF NOT EXISTS "`+name+`".outbox_events`)
	execSQL(t, db, "first", sql)
	execSQL(t, db, "second", sql)
	def, err := bunboxmigrate.SchemaSQL()
	require.NoError(t, err)
	zero, err := bunboxmigrate.SchemaSQL(bunboxmigrate.WithLocation(model.Location{}))
	require.NoError(t, err)
	require.Equal(t, def, zero, "the zero Location is today's SQL")
	require.NotContains(t, def, "CREATE SCHEMA")
	if !outboxtest.Pooled() {
		_, ref := upSchema(t)
		require.Equal(t, ref, schemaFingerprint(t, name))
	}
}
