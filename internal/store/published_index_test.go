package store

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// TestPublishedIndexServesCleanupAndReconciler: with the stream's rows in the table ('infinity', which
// outbox_events_published_at_idx leaves out), retention cleanup and the reconciler's page still find
// the rows they read through that index. A bound that PostgreSQL could not prove to leave
// 'infinity' out (a parameter it plans without seeing) would fail this.
func TestPublishedIndexServesCleanupAndReconciler(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, published_at, xid, created_at)
SELECT gen_random_uuid(), 'streamed', '{}', 'infinity', pg_current_xact_id(), now() - g * interval '1 second'
FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, published_at)
SELECT gen_random_uuid(), 'published', '{}', now() - g * interval '1 second' FROM generate_series(1, 5000) g`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "ANALYZE outbox_events")
	require.NoError(t, err)

	now := time.Now()
	empty := pgdialect.Array([]string{})
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"cleanup":    {deletePublishedSQL, []any{now.Add(-time.Hour), 1000}},
		"reconciler": {reconcilePageSQL, []any{now.Add(-10 * time.Minute), now.Add(-5 * time.Minute), now.Add(-10 * time.Minute), 0, empty, empty, 500}},
	} {
		var plan string
		require.NoError(t, db.NewRaw("EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(ctx, &plan), name)
		var indexes []string
		for _, m := range regexp.MustCompile(`"Index Name": "([^"]+)"`).FindAllStringSubmatch(plan, -1) {
			indexes = append(indexes, m[1])
		}
		require.Contains(t, indexes, "outbox_events_published_at_idx", "the indexes %s reads", name)
	}
}
