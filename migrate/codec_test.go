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

// TestPayloadCodecMigrationUpgradesRerunsAndRollsBack applies the migrations before the payload codec
// migration, writes rows, upgrades: the rows stay, their payload_encoded NULL. The migration runs again
// over itself (re-runnable). Rolling it back refuses while an unpublished row holds an encoded payload,
// which the column's drop would lose, and goes through once that row is published; the rows stay.
func TestPayloadCodecMigrationUpgradesRerunsAndRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})
	columnExists := func() bool {
		t.Helper()
		var n int
		require.NoError(t, db.NewRaw(`SELECT count(*) FROM information_schema.columns
WHERE table_schema = ? AND table_name = 'outbox_events' AND column_name = 'payload_encoded'`, name).Scan(ctx, &n))
		return n == 1
	}

	migrateBefore(t, db, "20261204000001")
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, published_at)
VALUES (gen_random_uuid(), 'a', '{"n":1}', NULL), (gen_random_uuid(), 'b', '{}', now())`)
	require.NoError(t, err)
	require.False(t, columnExists())

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.True(t, columnExists())
	require.EqualValues(t, 2, outboxtest.Count(t, db, "outbox_events", "payload_encoded IS NULL"))

	up, err := fs.ReadFile(bunboxmigrate.FS(), "20261204000001_bunbox_payload_codec.tx.up.sql")
	require.NoError(t, err)
	for _, stmt := range strings.Split(string(up), "--bun:split") {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, "the migration runs again over itself")
	}

	_, err = db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, payload_encoded, metadata)
VALUES (gen_random_uuid(), 'c', 'null', '\x1f8b'::bytea, '{"bunbox-payload-encoding": "gzip"}')`)
	require.NoError(t, err)
	m, err := bunboxmigrate.NewMigrator(db)
	require.NoError(t, err)
	_, err = m.Rollback(ctx)
	require.ErrorContains(t, err, "unpublished rows with an encoded payload")
	require.True(t, columnExists(), "the refused rollback keeps the column")

	_, err = db.ExecContext(ctx, `UPDATE outbox_events SET published_at = now() WHERE event_name = 'c'`)
	require.NoError(t, err)
	group, err := m.Rollback(ctx)
	require.NoError(t, err)
	require.Len(t, group.Migrations, 1)
	require.Equal(t, "20261204000001", group.Migrations[0].Name)
	require.False(t, columnExists())
	require.EqualValues(t, 3, outboxtest.Count(t, db, "outbox_events", "TRUE"))

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.True(t, columnExists())
}
