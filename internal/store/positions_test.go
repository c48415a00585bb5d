package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/tables"
)

// TestCursorReadUnderHeldHorizon: while a transaction holds the xmin horizon, every move of a cursor
// leaves a version that VACUUM may not remove. A read of the cursor still reads its newest position first
// (a few buffers), however many moves the horizon keeps: a cursor row updated in place was walked through
// every version it kept (250 buffers for one look-up after 3,000 moves), and a relay reads its lanes'
// cursors at every round.
func TestCursorReadUnderHeldHorizon(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	st := NewStream(tables.Names{})

	held, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	require.NoError(t, err)
	defer func() { _ = held.Rollback() }()
	_, err = held.ExecContext(ctx, "SELECT pg_current_xact_id()") // an xid and a snapshot: the horizon stays at them
	require.NoError(t, err)

	const moves = 1000
	for i := range moves {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		c, ok, err := st.LockCursor(ctx, tx, false)
		require.NoError(t, err)
		require.True(t, ok, "the base cursor row")
		require.Equal(t, int64(i+1), c.Seq)
		c.To = c.From // a pair open from the base's snapshot to itself, and a position in it
		require.NoError(t, st.MoveCursor(ctx, tx, c, "1", int64(i), false, 0))
		require.NoError(t, tx.Commit())
	}
	var kept int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM bunbox_stream_positions`).Scan(ctx, &kept))
	require.Equal(t, 1, kept, "a move deletes the position before it")

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, ok, err := st.LockCursor(ctx, tx, false)
	require.NoError(t, err)
	require.True(t, ok)
	buffers := func(query string, args ...any) int {
		t.Helper()
		var plan json.RawMessage
		require.NoError(t, tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+query, args...).Scan(&plan))
		var out []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
			}
		}
		require.NoError(t, json.Unmarshal(plan, &out))
		require.Len(t, out, 1)
		return out[0].Plan.Hit + out[0].Plan.Read
	}
	read := buffers(readCursorSQL, "outbox")
	t.Logf("after %d moves under a held horizon, the read of the cursor: %d buffers", moves, read)
	require.Less(t, read, 40, "the read of a cursor walks the positions the horizon keeps")
	var first int64 // the control: the holder still sees the first position, so none could be removed
	require.NoError(t, held.QueryRowContext(ctx, `SELECT min(seq) FROM bunbox_stream_positions`).Scan(&first))
	require.Equal(t, int64(1), first)
}
