package admin

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestCancelledNotCounted: cancelled events are not pending, and a cancelled dead event is not retried.
func TestCancelledNotCounted(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	insertEvents(t, db, "q1", 3)
	deadCancelled := insertDead(t, db, "q1", "gone", time.Hour)
	var ids []uuid.UUID
	require.NoError(t, db.NewRaw("SELECT event_id FROM outbox_events WHERE dead_at IS NULL ORDER BY id LIMIT 2").Scan(ctx, &ids))
	scheduled, err := model.NewEvent("later", nil, model.WithProcessIn(time.Hour))
	require.NoError(t, err)
	_, err = db.NewInsert().Model(scheduled).Exec(ctx)
	require.NoError(t, err)
	_, err = db.NewRaw("UPDATE outbox_events SET published_at = now() WHERE event_id = ?", scheduled.EventID).Exec(ctx)
	require.NoError(t, err)
	_, err = db.NewRaw("UPDATE outbox_events SET cancelled_at = now() WHERE event_id = ANY(?::uuid[]) OR event_id = ? OR event_id = ?",
		pgdialect.Array(uuidStrings(ids)), deadCancelled.EventID, scheduled.EventID).Exec(ctx)
	require.NoError(t, err)

	b, err := outboxOf(t, db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, b.Pending)
	require.Zero(t, b.Scheduled, "a cancelled scheduled event is not waiting to run")
	by, err := outboxOf(t, db).ReadBacklogByEvent(ctx)
	require.NoError(t, err)
	var pending int64
	for _, e := range by {
		pending += e.Pending
	}
	require.EqualValues(t, 1, pending)

	n, err := outboxOf(t, db).RetryDead(ctx, deadCancelled.EventID)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = outboxOf(t, db).RetryDeadWhere(ctx, DeadFilter{All: true})
	require.NoError(t, err)
	require.Zero(t, n)
}
