package migrate_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// objectsOf lists what the migrations made for prefix in schema: every index and constraint of its
// tables, and its sequences, with the prefix taken off (so two outboxes compare), and fails when one of
// them does not start with the prefix.
func objectsOf(t *testing.T, db bun.IDB, schema, prefix string) []string {
	t.Helper()
	var rows []struct {
		Kind, Name, Def string
	}
	require.NoError(t, db.NewRaw(`
		SELECT 'index' AS kind, indexname AS name, indexdef AS def FROM pg_indexes
		 WHERE schemaname = ? AND tablename IN (?, ?, ?)
		UNION ALL
		SELECT 'constraint', conname, pg_get_constraintdef(oid) FROM pg_constraint
		 WHERE conrelid IN (to_regclass(?), to_regclass(?), to_regclass(?))
		UNION ALL
		SELECT 'sequence', sequencename, '' FROM pg_sequences WHERE schemaname = ? AND sequencename LIKE ? || 'outbox_events%'`,
		schema, prefix+"outbox_events", prefix+"inbox_events", prefix+"bunbox_leases",
		`"`+schema+`".`+prefix+"outbox_events", `"`+schema+`".`+prefix+"inbox_events", `"`+schema+`".`+prefix+"bunbox_leases",
		schema, prefix).Scan(context.Background(), &rows))
	var out []string
	for _, r := range rows {
		require.True(t, strings.HasPrefix(r.Name, prefix), "%s %s starts with %q", r.Kind, r.Name, prefix)
		def := strings.NewReplacer(`"`+schema+`".`, "", schema+".", "").Replace(r.Def)
		out = append(out, r.Kind+" "+strings.TrimPrefix(r.Name, prefix)+": "+strings.ReplaceAll(def, " "+prefix, " "))
	}
	sort.Strings(out)
	kinds := map[string]bool{}
	for _, r := range rows {
		kinds[r.Kind] = true
	}
	require.Len(t, kinds, 3, "indexes, constraints and the sequence of %q: %v", prefix, out)
	return out
}

// TestUpWithTablePrefix migrates two outboxes with table prefixes into a schema that holds the unprefixed
// one already, twice each, without search_path (so also through the pooler): each has every table, index,
// constraint and sequence under its prefix, the same as the unprefixed outbox's, and its own bookkeeping;
// Down of one leaves the others.
func TestUpWithTablePrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t) // in the pooler pass a database of its own: two Ups at once would share two server connections
	s := outboxtest.TenantSchema(t, db, "tenant_tp_")
	ref := objectsOf(t, db, s, "")
	require.NotEmpty(t, ref)
	for _, p := range []string{"orders_", "billing_"} {
		outboxtest.TenantTables(t, db, s, p)
		opts := []bunboxmigrate.Option{bunboxmigrate.WithLocation(model.Location{Schema: s, TablePrefix: p})}
		require.NoError(t, bunboxmigrate.Up(ctx, db, opts...), "Up again for %s", p)
		for _, table := range []string{"outbox_events", "inbox_events", "bunbox_leases", "bunbox_migrations", "bunbox_migration_locks"} {
			var ok bool
			require.NoError(t, db.NewRaw("SELECT to_regclass(?) IS NOT NULL", `"`+s+`".`+p+table).Scan(ctx, &ok))
			require.True(t, ok, "%s.%s%s exists", s, p, table)
		}
		require.Equal(t, ref, objectsOf(t, db, s, p), "the outbox of %s is the unprefixed one, renamed", p)
		status, err := bunboxmigrate.Status(ctx, db, opts...)
		require.NoError(t, err)
		require.Len(t, status.Applied(), len(status), "every migration applied for %s", p)
	}

	require.NoError(t, bunboxmigrate.Down(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: s, TablePrefix: "orders_"})))
	tables := func(p string) int {
		var n int
		require.NoError(t, db.NewRaw("SELECT count(*) FROM pg_tables WHERE schemaname = ? AND tablename IN (?, ?, ?)",
			s, p+"outbox_events", p+"inbox_events", p+"bunbox_leases").Scan(ctx, &n))
		return n
	}
	require.Zero(t, tables("orders_"), "Down dropped the tables of orders_")
	require.Equal(t, 3, tables("billing_"), "and left billing_'s")
	require.Equal(t, 3, tables(""), "and the unprefixed ones")
	require.Equal(t, ref, objectsOf(t, db, s, "billing_"))
	status, err := bunboxmigrate.Status(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: s}))
	require.NoError(t, err)
	require.Len(t, status.Applied(), len(status), "the unprefixed outbox's bookkeeping is its own")
	require.NoError(t, bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: s, TablePrefix: "orders_"})), "Up after Down")
	require.Equal(t, ref, objectsOf(t, db, s, "orders_"))
}

// TestUpWithTablePrefixOnly: a prefix without a schema names the tables in the schema search_path finds
// (a fresh database in the pooler pass), beside the unprefixed outbox there.
func TestUpWithTablePrefixOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	require.NoError(t, bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{TablePrefix: "orders_"})))
	require.NoError(t, bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{TablePrefix: "orders_"})), "again")
	var schema string
	require.NoError(t, db.NewRaw("SELECT current_schema()").Scan(ctx, &schema))
	require.Equal(t, objectsOf(t, db, schema, ""), objectsOf(t, db, schema, "orders_"))
}

// TestSchemaSQLWithLocationTablePrefix: `bunbox schema -schema S -table-prefix P` applied twice builds what Up
// builds for them.
func TestSchemaSQLWithLocationTablePrefix(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	s := outboxtest.TenantSchema(t, db, "tenant_tsql_")
	sql, err := bunboxmigrate.SchemaSQL(bunboxmigrate.WithLocation(model.Location{Schema: s, TablePrefix: "orders_"}))
	require.NoError(t, err)
	require.Contains(t, sql, `CREATE TABLE IF NOT EXISTS "`+s+`".orders_outbox_events`)
	require.Contains(t, sql, `CREATE INDEX IF NOT EXISTS orders_outbox_events_pending_idx ON "`+s+`".orders_outbox_events`)
	execSQL(t, db, "first", sql)
	execSQL(t, db, "second", sql)
	require.Equal(t, objectsOf(t, db, s, ""), objectsOf(t, db, s, "orders_"))
	only, err := bunboxmigrate.SchemaSQL(bunboxmigrate.WithLocation(model.Location{TablePrefix: "orders_"}))
	require.NoError(t, err)
	require.NotContains(t, only, "CREATE SCHEMA")
	require.Contains(t, only, "CREATE TABLE IF NOT EXISTS orders_outbox_events")
}

// TestWithTablePrefixRefusesBadNames: a prefix bunbox cannot use fails the call with an error that names
// the option and the value, before any statement runs; so does one that, with the schema, makes the
// NOTIFY channel longer than PostgreSQL's 63 bytes.
func TestWithTablePrefixRefusesBadNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.Unconnected(t) // nothing may reach the server
	for _, bad := range []string{`orders"; DROP TABLE outbox_events; --`, "Orders_", "1orders", "pg_orders", "a.b", strings.Repeat("p", 25)} {
		err := bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{TablePrefix: bad}))
		require.ErrorContains(t, err, "migrate: WithLocation: model: Location.TablePrefix: invalid table prefix", bad)
		require.ErrorContains(t, err, strings.ReplaceAll(bad, `"`, `\"`), "the error names the value")
		_, err = bunboxmigrate.SchemaSQL(bunboxmigrate.WithLocation(model.Location{TablePrefix: bad}))
		require.Error(t, err)
	}
	err := bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{Schema: strings.Repeat("s", 48), TablePrefix: "orders_"}))
	require.ErrorContains(t, err, "migrate: WithLocation: model: Location.TablePrefix: invalid table prefix \"orders_\"")
	require.ErrorContains(t, err, "over PostgreSQL's 63")
	err = bunboxmigrate.Up(ctx, db, bunboxmigrate.WithLocation(model.Location{TablePrefix: "orders_", Schema: "a b"}))
	require.ErrorContains(t, err, "migrate: WithLocation: model: Location.Schema: invalid schema name")
}

// TestTablePrefixNamesFit: with the longest prefix, every name the migrations derive from a table fits
// PostgreSQL's 63-byte identifiers (a longer one would be cut silently, and two could meet); a new
// migration with a long index name fails here.
func TestTablePrefixNamesFit(t *testing.T) {
	t.Parallel()
	prefix := strings.Repeat("p", 24)
	sql, err := bunboxmigrate.SchemaSQL(bunboxmigrate.WithLocation(model.Location{TablePrefix: prefix}))
	require.NoError(t, err)
	words := strings.FieldsFunc(sql, func(r rune) bool {
		return r != '_' && (r < 'a' || r > 'z') && (r < '0' || r > '9') && (r < 'A' || r > 'Z')
	})
	var seen int
	for _, w := range words {
		if strings.HasPrefix(w, prefix) {
			seen++
			require.LessOrEqual(t, len(w), 63, "%s", w)
		}
	}
	require.NotZero(t, seen)
}
