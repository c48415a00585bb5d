package relay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/maintenance/reconcile"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
)

// A reconciler's page of streamed rows within its window is read from the stream's index in its order,
// whatever the statistics and the costs say, and is not compiled: with a random_page_cost that makes the
// index look dear and jit_above_cost at 0, the read without its settings sorts, scans by bitmap or is
// compiled; with reconcile.StreamPageBounds it does none of these.
func TestReconcilerStreamPageKeepsToTheIndex(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db := streamWithNewRowsAnalyzed(t)
	outboxtest.DeliverStream(t, db)
	var afterXID string // a page in the middle of the new rows
	require.NoError(t, db.NewRaw("SELECT xid::text FROM outbox_events WHERE event_name = 'new' ORDER BY xid, id OFFSET 1500 LIMIT 1").
		Scan(ctx, &afterXID))
	var now time.Time
	require.NoError(t, db.NewRaw("SELECT now()").Scan(ctx, &now))

	// The cursor rows as a pass reads them: the page of an incremental pass joins them.
	var names, snaps []string
	require.NoError(t, db.NewRaw("SELECT array_agg(name ORDER BY name), array_agg(snap_from::text ORDER BY name) FROM "+streamsql.CursorRows+" cr").
		Scan(ctx, pgdialect.Array(&names), pgdialect.Array(&snaps)))

	explain := func(bounds sessionBounds, sinceNames, sinceSnaps any) string {
		tx, err := beginBounded(ctx, db, bounds)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, "SET LOCAL random_page_cost = 1000; SET LOCAL jit_above_cost = 0")
		require.NoError(t, err)
		var plan json.RawMessage
		none := pgdialect.Array([]string{})
		require.NoError(t, tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.StreamedPageSQL(false),
			now.Add(-time.Hour), now, afterXID, 0, none, none, 500, store.MaxXID, sinceNames, sinceSnaps).Scan(&plan))
		t.Logf("%d buffers", planBuffers(t, plan))
		return string(plan)
	}
	for _, since := range []struct {
		name         string
		names, snaps any
	}{{"sweep", nil, nil}, {"incremental", pgdialect.Array(names), pgdialect.Array(snaps)}} {
		t.Run(since.name, func(t *testing.T) {
			bad := explain(sessionBounds{}, since.names, since.snaps)
			require.True(t, strings.Contains(bad, `"Sort"`) || strings.Contains(bad, `"Bitmap Heap Scan"`) || strings.Contains(bad, `"JIT"`),
				"the planner keeps to the index anyway: the test shows nothing")
			plan := explain(sessionBounds{sql: reconcile.StreamPageBounds}, since.names, since.snaps)
			require.NotContains(t, plan, `"Sort"`, "the page sorts the window's rows")
			require.NotContains(t, plan, `"Bitmap Heap Scan"`, "the page scans the window's rows by bitmap")
			require.NotContains(t, plan, `"JIT"`, "the page is compiled")
		})
	}
}
