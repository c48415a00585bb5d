package admin

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// insertDead commits a dead event named name that died age ago, in queue.
func insertDead(t *testing.T, db bun.IDB, queue, name string, age time.Duration) *model.Event {
	t.Helper()
	ev, err := model.NewEvent(name, nil, model.WithQueue(queue))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = db.NewInsert().Model(ev).Exec(ctx)
	require.NoError(t, err)
	_, err = db.NewRaw("UPDATE outbox_events SET published_at = NULL, dead_at = now() - ? * interval '1 second', attempts = 10 WHERE event_id = ?",
		int64(age.Seconds()), ev.EventID).Exec(ctx)
	require.NoError(t, err)
	return ev
}

func TestDeadFilter(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	oldA := insertDead(t, db, "q1", "a", 48*time.Hour)
	newA := insertDead(t, db, "q1", "a", time.Minute)
	oldB := insertDead(t, db, "q2", "b", 48*time.Hour)
	insertEvents(t, db, "q1", 2) // pending, never touched
	dead := func() int64 { return outboxtest.Count(t, db, "outbox_events", "dead_at IS NOT NULL") }

	_, err := outboxOf(t, db).PurgeDead(ctx, DeadFilter{})
	require.ErrorIs(t, err, ErrEmptyDeadFilter)
	_, err = outboxOf(t, db).RetryDeadWhere(ctx, DeadFilter{OlderThan: -time.Hour})
	require.ErrorContains(t, err, "OlderThan")

	n, err := outboxOf(t, db).CountDead(ctx, DeadFilter{Names: []string{"a"}, OlderThan: 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	by, err := outboxOf(t, db).ReadBacklogByEvent(ctx)
	require.NoError(t, err)
	require.Len(t, by, 3)
	require.Equal(t, EventBacklog{Queue: "q1", EventName: "a", Dead: 2}, by[0])
	require.Equal(t, "q1", by[1].Queue)
	require.Equal(t, "test.event", by[1].EventName)
	require.Equal(t, int64(2), by[1].Pending)
	require.Positive(t, by[1].Lag)
	require.Equal(t, EventBacklog{Queue: "q2", EventName: "b", Dead: 1}, by[2])

	// Purge by age and name: only the old "a".
	n, err = outboxOf(t, db).PurgeDead(ctx, DeadFilter{Names: []string{"a"}, OlderThan: 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Zero(t, outboxtest.Count(t, db, "outbox_events", "event_id = ?", oldA.EventID))

	// Retry by id: only that one, and unknown ids are ignored.
	n, err = outboxOf(t, db).RetryDeadWhere(ctx, DeadFilter{EventIDs: []uuid.UUID{newA.EventID, uuid.New()}})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, int64(1), dead())

	// All: what is left.
	n, err = outboxOf(t, db).RetryDeadWhere(ctx, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Zero(t, dead())
	require.Equal(t, int64(1), outboxtest.Count(t, db, "outbox_events", "event_id = ? AND attempts = 0", oldB.EventID))
	require.Equal(t, int64(4), outboxtest.Count(t, db, "outbox_events", "dead_at IS NULL"))
}

// insertEvents inserts n pending events into queue.
func insertEvents(t testing.TB, db bun.IDB, queue string, n int) {
	t.Helper()
	for i := range n {
		ev, err := model.NewEvent("test.event", map[string]int{"n": i}, model.WithQueue(queue))
		require.NoError(t, err)
		_, err = db.NewInsert().Model(ev).Exec(context.Background())
		require.NoError(t, err)
	}
}
