package relay_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// A lane that stops getting rows keeps its snapshot, and the counts of waiting streamed rows (bunbox
// status, the metrics, the dead-row reports, the page) do not wait for it: their lower bound,
// streamsql.WaitingFrom, moves past it with the lanes that deliver, so a count reads the rows from there
// on, not every row written since the idle lane last moved. A row that then waits in the idle lane is
// counted again. (With the least snapshot of every cursor row as the bound, it stays at the idle lane's.)
// On a PostgreSQL of the test's own: another test's open transaction would hold the bound back.
func TestStreamLanesIdleLaneDoesNotHoldTheCountsBack(t *testing.T) {
	t.Parallel()
	b := setupPrivateReconcile(t)
	ctx := context.Background()
	// A test of the stream's lanes, also under BUNBOX_TEST_STREAM=off.
	require.NoError(t, relay.EnableStream(ctx, b.db, model.Location{}))
	xid := func(query string) uint64 {
		t.Helper()
		var s string
		require.NoError(t, b.db.NewRaw(query).Scan(ctx, &s))
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "xid8 %q", s)
		return n
	}
	waitingFrom := func() uint64 { return xid("SELECT (" + streamsql.WaitingFrom + ")::text") }
	pending := func() int {
		var n int
		require.NoError(t, b.db.NewRaw("SELECT count(*) FROM "+streamsql.PendingRows+" e").Scan(ctx, &n))
		return n
	}

	b.insertInto(t, "idle", 3)
	b.insertInto(t, "busy", 3)
	b.relayAll(t)
	idle := xid("SELECT max(pg_snapshot_xmin(snap_from))::text FROM " + streamsql.CursorRows + " cr WHERE queue = 'idle'")
	for range 3 {
		b.insertInto(t, "busy", 4)
		b.relayAll(t)
	}
	require.Zero(t, pending())
	require.Greater(t, waitingFrom(), idle, "the idle lane holds the counts' bound back")

	late := b.insertInto(t, "idle", 1)
	require.Equal(t, 1, pending(), "the row waiting in the idle lane")
	row := xid("SELECT xid::text FROM outbox_events WHERE event_id = '" + late[0].EventID.String() + "'")
	require.LessOrEqual(t, waitingFrom(), row)
}
