package migrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// TestStreamLanesMigrationDown rolls back the lanes (20261210000001) over streamed rows in every state,
// back to one cursor (the base row): a row its lane delivered and the base would take for waiting leaves
// the stream as published; a row waiting in its lane goes to the per-row path (pending), even when the
// base had moved past it; a row of a lane with no cursor row stays as the base judges it. The lanes' rows,
// the index and the column go, and the migration applies again.
func TestStreamLanesMigrationDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})
	migrateBefore(t, db, "20261210000001")
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(ctx, q, args...)
		require.NoError(t, err, q)
	}
	exec(`ALTER TABLE outbox_events ALTER COLUMN xid SET DEFAULT pg_current_xact_id(),
  ALTER COLUMN published_at SET DEFAULT 'infinity'::timestamptz`)
	exec(`INSERT INTO bunbox_stream (name, snap_from, system_id, max_id) VALUES ('outbox', pg_current_snapshot(),
  (SELECT system_identifier FROM pg_control_system()), 0) ON CONFLICT (name) DO NOTHING`) // 20261209000001 wrote it
	migrateBefore(t, db, "20261211000001") // the lanes, with the cursor rows' positions still in them
	insert := func(event string, slice int) {
		t.Helper()
		exec(`INSERT INTO outbox_events (event_id, event_name, payload, queue, stream_slice) VALUES (gen_random_uuid(), ?, '{}', 'q', ?)`, event, slice)
	}
	insert("lane-delivered-1", 0)
	insert("lane-waiting", 1)
	exec(`INSERT INTO bunbox_stream (name, queue, slice, snap_from, system_id, max_id, moved_at)
SELECT 'outbox/q/' || s, 'q', s, snap_from, system_id, max_id, moved_at FROM bunbox_stream, generate_series(0, 1) AS s
WHERE name = 'outbox'`)
	insert("base-delivered", 2)                                                              // a lane with no cursor row: the base judges it
	exec(`UPDATE bunbox_stream SET snap_from = pg_current_snapshot() WHERE name = 'outbox'`) // as relays move it
	insert("lane-delivered-2", 0)
	exec(`UPDATE bunbox_stream SET snap_from = pg_current_snapshot(), moved_at = now() - interval '1 minute' WHERE name = 'outbox/q/0'`)
	insert("base-waiting", 2)

	m, err := bunboxmigrate.NewMigrator(db)
	require.NoError(t, err)
	group, err := m.Rollback(ctx)
	require.NoError(t, err)
	require.Len(t, group.Migrations, 1)
	require.Equal(t, "20261210000001", group.Migrations[0].Name)

	state := func(event string) string {
		t.Helper()
		var s string
		require.NoError(t, db.NewRaw(`SELECT CASE WHEN e.published_at IS NULL THEN 'pending'
  WHEN e.published_at = 'infinity' THEN CASE WHEN pg_visible_in_snapshot(e.xid, s.snap_from) THEN 'streamed, delivered'
    ELSE 'streamed, waiting' END
  ELSE 'published' END
FROM outbox_events e, bunbox_stream s WHERE s.name = 'outbox' AND e.event_name = ?`, event).Scan(ctx, &s))
		return s
	}
	require.Equal(t, "streamed, delivered", state("lane-delivered-1"), "delivered for its lane and the base")
	require.Equal(t, "published", state("lane-delivered-2"), "delivered for its lane, waiting for the base")
	require.Equal(t, "pending", state("lane-waiting"), "delivered for the base, waiting in its lane")
	require.Equal(t, "streamed, delivered", state("base-delivered"))
	require.Equal(t, "streamed, waiting", state("base-waiting"))
	require.EqualValues(t, 1, outboxtest.Count(t, db, "bunbox_stream", ""), "the base row only")
	var col, idx bool
	require.NoError(t, db.NewRaw(`SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = ?
  AND table_name = 'outbox_events' AND column_name = 'stream_slice'), to_regclass('outbox_events_stream_lane_idx') IS NOT NULL`,
		name).Scan(ctx, &col, &idx))
	require.False(t, col)
	require.False(t, idx)

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.EqualValues(t, 5, outboxtest.Count(t, db, "outbox_events", ""))
}
