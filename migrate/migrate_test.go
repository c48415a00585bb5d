package migrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})

	tableExists := func() bool {
		var ok bool
		require.NoError(t, db.NewRaw("SELECT to_regclass(?) IS NOT NULL", name+".outbox_events").Scan(ctx, &ok))
		return ok
	}

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.True(t, tableExists())
	require.NoError(t, bunboxmigrate.Up(ctx, db), "Up is idempotent")

	ev, err := model.NewEvent("order.placed", map[string]int{"id": 1})
	require.NoError(t, err)
	_, err = db.NewInsert().Model(ev).Exec(ctx)
	require.NoError(t, err)
	require.NotZero(t, ev.ID)
	require.False(t, ev.CreatedAt.IsZero(), "created_at comes back from the database default")

	require.NoError(t, bunboxmigrate.Down(ctx, db))
	require.False(t, tableExists())
	require.NoError(t, bunboxmigrate.Down(ctx, db), "Down on an empty schema is a no-op")

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.True(t, tableExists())

	status, err := bunboxmigrate.Status(ctx, db)
	require.NoError(t, err)
	require.Empty(t, status.Unapplied())
}

func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})

	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- bunboxmigrate.Up(ctx, db) }()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
	status, err := bunboxmigrate.Status(ctx, db)
	require.NoError(t, err)
	require.Len(t, status.Applied(), len(status))
}

func TestFailedMigrationIsNotMarkedApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})

	// A view in the table's place makes the migration fail half-way, at its first index.
	_, err := db.ExecContext(ctx, "CREATE VIEW outbox_events AS SELECT 1 AS id")
	require.NoError(t, err)
	require.Error(t, bunboxmigrate.Up(ctx, db))

	var indexes int
	require.NoError(t, db.NewRaw("SELECT count(*) FROM pg_indexes WHERE schemaname = ? AND indexname LIKE ?", name, "outbox_events%").Scan(ctx, &indexes))
	require.Zero(t, indexes, "the transactional migration rolled back")
	status, err := bunboxmigrate.Status(ctx, db)
	require.NoError(t, err)
	require.Empty(t, status.Applied())

	_, err = db.ExecContext(ctx, "DROP VIEW outbox_events")
	require.NoError(t, err)
	require.NoError(t, bunboxmigrate.Up(ctx, db), "a fixed schema migrates on the next try")
}

func TestSchemaSQL(t *testing.T) {
	t.Parallel()
	sql := defaultSchemaSQL(t)
	require.Contains(t, sql, "CREATE TABLE IF NOT EXISTS outbox_events")
	require.NotContains(t, sql, "--bun:")

	// The plain SQL is what the migrations apply: a schema built from it takes an event.
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})
	_, err := db.DB.ExecContext(ctx, sql) // one multi-statement query, as psql -f or a migration tool sends it
	require.NoError(t, err)
	ev, err := model.NewEvent("x", nil)
	require.NoError(t, err)
	_, err = db.NewInsert().Model(ev).Exec(ctx)
	require.NoError(t, err)
}

// defaultSchemaSQL returns SchemaSQL of the default Location.
func defaultSchemaSQL(t testing.TB) string {
	t.Helper()
	sql, err := bunboxmigrate.SchemaSQL()
	require.NoError(t, err)
	return sql
}
