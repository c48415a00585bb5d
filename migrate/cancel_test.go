package migrate_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// TestCancelMigrationUpgradesRerunsAndRollsBack applies the migrations before the cancel migration,
// writes rows, upgrades: the rows stay, not cancelled, and the claim index leaves cancelled rows out. The
// migration runs again over itself without error (re-runnable), and rolling it back restores the claim
// index the ordering migration made.
func TestCancelMigrationUpgradesRerunsAndRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})
	indexDef := func(index string) string {
		t.Helper()
		var def string
		require.NoError(t, db.NewRaw("SELECT coalesce((SELECT indexdef FROM pg_indexes WHERE schemaname = ? AND indexname = ?), '')",
			name, index).Scan(ctx, &def))
		return def
	}

	migrateBefore(t, db, "20261202000002")
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, published_at)
VALUES (gen_random_uuid(), 'a', '{}', NULL), (gen_random_uuid(), 'b', '{}', now())`)
	require.NoError(t, err)
	require.NotContains(t, indexDef("outbox_events_unkeyed_pending_idx"), "cancelled_at")

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.EqualValues(t, 2, outboxtest.Count(t, db, "outbox_events", "cancelled_at IS NULL AND cancel_settled_at IS NULL AND cancel_result IS NULL"))
	require.Contains(t, indexDef("outbox_events_unkeyed_pending_idx"), "cancelled_at IS NULL")
	for _, idx := range []string{"outbox_events_queue_claim_idx", "outbox_events_cancelling_idx", "outbox_events_cancelled_idx"} {
		require.NotEmpty(t, indexDef(idx), idx)
	}

	up, err := fs.ReadFile(bunboxmigrate.FS(), "20261202000002_bunbox_cancel.tx.up.sql")
	require.NoError(t, err)
	for _, stmt := range strings.Split(string(up), "--bun:split") {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, "the migration runs again over itself")
	}

	m, err := bunboxmigrate.NewMigrator(db)
	require.NoError(t, err)
	group, err := m.Rollback(ctx)
	require.NoError(t, err)
	var names []string
	for _, mg := range group.Migrations {
		names = append(names, mg.Name)
	}
	require.ElementsMatch(t, []string{"20261202000002", "20261204000001", "20261205000001", "20261206000001", "20261207000001", "20261208000001", "20261208000002", "20261209000001", "20261210000001", "20261211000001"}, names, "the cancel migration and the ones after it, one group")
	require.EqualValues(t, 2, outboxtest.Count(t, db, "outbox_events", "TRUE"))
	require.NotContains(t, indexDef("outbox_events_unkeyed_pending_idx"), "cancelled_at")
	require.Empty(t, indexDef("outbox_events_queue_claim_idx"))

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.Contains(t, indexDef("outbox_events_unkeyed_pending_idx"), "cancelled_at IS NULL")
}
