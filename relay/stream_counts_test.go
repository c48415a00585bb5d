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
// status, the metrics, the dead-row reports, the page) do not wait for it: each lane is read from its own
// snapshot on (streamsql.WaitingRows), in its own part of the lanes' index, so the idle lane's old
// snapshot reads none of the busy lane's rows, and a row that then waits in the idle lane is counted.
// On a PostgreSQL of the test's own: another test's open transaction would hold the snapshots back.
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
	require.Greater(t, xid("SELECT max(pg_snapshot_xmax(snap_from))::text FROM "+streamsql.CursorRows+" cr WHERE queue = 'busy'"), idle,
		"the busy lane did not move past the idle lane's snapshot: the test shows nothing")

	b.insertInto(t, "idle", 1)
	require.Equal(t, 1, pending(), "the row waiting in the idle lane")
}
