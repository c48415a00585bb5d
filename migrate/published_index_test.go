package migrate_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// TestPublishedIndexMigrationLeavesStreamedRowsOut upgrades a table that holds a row the per-row relay
// published, a streamed row ('infinity') and a pending row: the rows stay, the index of publish times
// holds the published row only, and the old index is gone. The migration runs again over itself, and
// rolling it back restores the old index with every row that is not pending in it.
func TestPublishedIndexMigrationLeavesStreamedRowsOut(t *testing.T) {
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
	// entries counts the entries of an index by reading it alone (an index-only scan of its key).
	entries := func(index string) int64 {
		t.Helper()
		var n int64
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			for _, set := range []string{"SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"} {
				if _, err := tx.ExecContext(ctx, set); err != nil {
					return err
				}
			}
			var plan string
			q := "SELECT count(published_at) FROM outbox_events WHERE published_at IS NOT NULL"
			if strings.HasSuffix(index, "_at_idx") {
				q += " AND published_at <> 'infinity'"
			}
			if err := tx.NewRaw("EXPLAIN (FORMAT JSON) "+q).Scan(ctx, &plan); err != nil {
				return err
			}
			require.Contains(t, plan, index)
			return tx.NewRaw(q).Scan(ctx, &n)
		})
		require.NoError(t, err)
		return n
	}

	migrateBefore(t, db, "20261207000001")
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, published_at, xid)
VALUES (gen_random_uuid(), 'published', '{}', now(), NULL),
       (gen_random_uuid(), 'streamed', '{}', 'infinity', pg_current_xact_id()),
       (gen_random_uuid(), 'pending', '{}', NULL, NULL)`)
	require.NoError(t, err)
	require.NotEmpty(t, indexDef("outbox_events_published_idx"))
	require.EqualValues(t, 2, entries("outbox_events_published_idx"), "the old index holds the streamed row too")

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.EqualValues(t, 3, outboxtest.Count(t, db, "outbox_events", ""))
	require.Empty(t, indexDef("outbox_events_published_idx"))
	require.Contains(t, indexDef("outbox_events_published_at_idx"), "'infinity'")
	require.EqualValues(t, 1, entries("outbox_events_published_at_idx"), "the new index holds the published row only")

	up, err := fs.ReadFile(bunboxmigrate.FS(), "20261207000001_bunbox_published_index.tx.up.sql")
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
	require.Equal(t, []string{"20261207000001", "20261208000001", "20261208000002", "20261209000001", "20261210000001", "20261211000001"}, names, "the migration and the ones after it, one group")
	require.Empty(t, indexDef("outbox_events_published_at_idx"))
	require.EqualValues(t, 2, entries("outbox_events_published_idx"))
	require.EqualValues(t, 3, outboxtest.Count(t, db, "outbox_events", ""))

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.EqualValues(t, 1, entries("outbox_events_published_at_idx"))
}
