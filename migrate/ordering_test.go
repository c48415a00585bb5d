package migrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// TestOrderingMigrationUpgradesAndRollsBack applies the migrations before 004 (per-key ordering), writes
// rows, then upgrades with Up: the rows stay and are unkeyed. Rolling 004 back keeps them too.
func TestOrderingMigrationUpgradesAndRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})

	migrateBefore(t, db, "20261201000004")
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, published_at)
VALUES (gen_random_uuid(), 'a', '{}', NULL), (gen_random_uuid(), 'b', '{}', now())`)
	require.NoError(t, err)

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.EqualValues(t, 2, outboxtest.Count(t, db, "outbox_events", "ordering_key IS NULL AND completed_at IS NULL"))
	var indexes int
	require.NoError(t, db.NewRaw("SELECT count(*) FROM pg_indexes WHERE schemaname = ? AND indexname LIKE 'outbox_events_%keyed%'", name).Scan(ctx, &indexes))
	require.Equal(t, 3, indexes)

	full, err := bunboxmigrate.NewMigrator(db)
	require.NoError(t, err)
	group, err := full.Rollback(ctx)
	require.NoError(t, err)
	var names []string
	for _, mg := range group.Migrations {
		names = append(names, mg.Name)
	}
	require.ElementsMatch(t, []string{"20261201000004", "20261202000001", "20261202000002", "20261204000001", "20261205000001", "20261206000001", "20261207000001", "20261208000001", "20261208000002", "20261209000001", "20261210000001", "20261211000001"}, names, "004 and the migrations after it, one group")
	require.EqualValues(t, 2, outboxtest.Count(t, db, "outbox_events", "TRUE"))
	var cols int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM information_schema.columns WHERE table_schema = ? AND table_name = 'outbox_events'
AND column_name IN ('ordering_key', 'completed_at')`, name).Scan(ctx, &cols))
	require.Zero(t, cols)
}
