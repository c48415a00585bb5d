package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

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
	kept, err := st.CountPositions(ctx, db)
	require.NoError(t, err)
	require.EqualValues(t, moves+1, kept, "a move inserts a position and deletes none")

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
	require.NoError(t, tx.Rollback())

	// The rotation empties the partition, held horizon or not, and the cursor is where it was.
	before := readCursor(t, db, st)
	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, st.LockAll(ctx, tx))
	r, err := st.Rotate(ctx, tx, moves)
	require.NoError(t, err)
	require.Equal(t, Rotation{Rotated: true, Left: moves + 1}, r)
	require.NoError(t, tx.Commit())
	after := readCursor(t, db, st)
	require.Equal(t, before.Seq+1, after.Seq)
	before.Seq, before.Xmax, after.Xmax = after.Seq, "", ""
	require.Equal(t, before, after, "the rotation moves no cursor")
	kept, err = st.CountPositions(ctx, db)
	require.NoError(t, err)
	require.EqualValues(t, 1, kept)
	var size int64
	require.NoError(t, db.NewRaw(`SELECT pg_relation_size('bunbox_stream_positions_0')`).Scan(ctx, &size))
	require.Zero(t, size, "the partition left is empty")
	var part int
	require.NoError(t, db.NewRaw(`SELECT part FROM bunbox_stream_positions`).Scan(ctx, &part))
	require.Equal(t, 1, part)
	r, err = func() (Rotation, error) { // a second rotation waits for more positions
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		return st.Rotate(ctx, tx, moves)
	}()
	require.NoError(t, err)
	require.False(t, r.Rotated)
}

// readCursor reads the base cursor, in a transaction of its own.
func readCursor(t *testing.T, db bun.IDB, st *Stream) Cursor {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	c, ok, err := st.LockCursor(ctx, tx, false)
	require.NoError(t, err)
	require.True(t, ok)
	return c
}
