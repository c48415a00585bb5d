package migrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/streamsql"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// TestStreamPositionsMigrationKeepsEveryRowsState moves the cursors' positions out of their rows
// (20261211000001) over streamed rows delivered and waiting, in lanes with cursor rows and without: every
// row is judged the same before the migration, after it, and after its rollback, so none is delivered
// twice or skipped.
func TestStreamPositionsMigrationKeepsEveryRowsState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})
	migrateBefore(t, db, "20261211000001")
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(ctx, q, args...)
		require.NoError(t, err, q)
	}
	insert := func(event string, slice int) {
		t.Helper()
		exec(`INSERT INTO outbox_events (event_id, event_name, payload, queue, stream_slice) VALUES (gen_random_uuid(), ?, '{}', 'q', ?)`, event, slice)
	}
	insert("base-delivered", 2)
	exec(`UPDATE bunbox_stream SET snap_from = pg_current_snapshot() WHERE name = 'outbox'`)
	exec(`INSERT INTO bunbox_stream (name, queue, slice, snap_from, system_id, max_id, moved_at)
SELECT 'outbox/q/' || s, 'q', s, snap_from, system_id, max_id, moved_at FROM bunbox_stream, generate_series(0, 1) AS s
WHERE name = 'outbox'`)
	insert("lane-delivered", 0)
	insert("lane-in-pair", 0)
	insert("lane-waiting", 1)
	insert("base-waiting", 2)
	// Lane 0 has a pair open, at its first row: lane-delivered passed, lane-in-pair not.
	exec(`UPDATE bunbox_stream s SET snap_to = pg_current_snapshot(), after_xid = e.xid, after_id = e.id
FROM outbox_events e WHERE s.name = 'outbox/q/0' AND e.event_name = 'lane-delivered'`)
	insert("lane-after-pair", 0)

	// Judged with the positions in the cursor rows, as the relays before the migration did.
	const before = `SELECT e.event_name, coalesce(pg_visible_in_snapshot(e.xid, s.snap_from)
    OR (s.snap_to IS NOT NULL AND pg_visible_in_snapshot(e.xid, s.snap_to) AND (e.xid, e.id) <= (s.after_xid, s.after_id)), false)
FROM outbox_events e JOIN bunbox_stream s
  ON s.name = coalesce((SELECT c.name FROM bunbox_stream c WHERE c.name = 'outbox/' || e.queue || '/' || coalesce(e.stream_slice, 0)), 'outbox')
ORDER BY e.event_name`
	const after = `SELECT e.event_name, ` + streamsql.Delivered + ` FROM outbox_events e ` + streamsql.Cursor + ` ORDER BY e.event_name`
	judge := func(query string) map[string]bool {
		t.Helper()
		rows, err := db.QueryContext(ctx, query)
		require.NoError(t, err)
		defer rows.Close()
		m := map[string]bool{}
		for rows.Next() {
			var event string
			var delivered bool
			require.NoError(t, rows.Scan(&event, &delivered))
			m[event] = delivered
		}
		require.NoError(t, rows.Err())
		return m
	}
	want := map[string]bool{"base-delivered": true, "lane-delivered": true, "lane-in-pair": false,
		"lane-waiting": false, "base-waiting": false, "lane-after-pair": false}
	require.Equal(t, want, judge(before))

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.Equal(t, want, judge(after), "after the migration")
	require.EqualValues(t, 3, outboxtest.Count(t, db, "bunbox_stream_positions", ""), "one position per cursor")

	m, err := bunboxmigrate.NewMigrator(db)
	require.NoError(t, err)
	group, err := m.Rollback(ctx)
	require.NoError(t, err)
	require.Len(t, group.Migrations, 1)
	require.Equal(t, "20261211000001", group.Migrations[0].Name)
	require.Equal(t, want, judge(before), "after the rollback")

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.Equal(t, want, judge(after), "after the migration again")
}
