package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// badRows are rows raw SQL may write around bunx, each as the SET clause of an UPDATE of a dead row, with
// what the listing must say of it.
var badRows = []struct{ set, says string }{
	{`metadata = '{"k": 5}'`, `metadata {"k": 5} is not a JSON object of strings`},
	{`metadata = '[1, 2]'`, `metadata [1, 2] is not a JSON object of strings`},
	{`metadata = '1'`, `metadata 1 is not a JSON object of strings`},
	{`metadata = '"text"'`, `metadata "text" is not a JSON object of strings`},
	{`metadata = '{"a": "b", "n": null}'`, `is not a JSON object of strings`},
	{`created_at = 'infinity'`, `created_at is infinity`},
	{`dead_at = 'infinity'`, `dead_at is infinity`},
	{`next_attempt_at = '-infinity', process_at = 'infinity'`, `process_at is infinity; next_attempt_at is -infinity`},
	{`published_at = '-infinity'`, `published_at is -infinity`},
	{`metadata = '{"k": 5}', deadline = '-infinity'`, `is not a JSON object of strings; deadline is -infinity`},
}

// insertBadRows writes a good dead row, then one bad dead row per badRows, then another good one, with
// raw SQL; it returns the ids of the bad ones in badRows' order and of the good ones.
func insertBadRows(t *testing.T, db bun.IDB) (bad, good []uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	good = append(good, insertDead(t, db, "q1", "good.first", time.Hour).EventID)
	for i, r := range badRows {
		ev := insertDead(t, db, "q1", "bad.row", time.Hour)
		_, err := db.NewRaw("UPDATE outbox_events SET "+r.set+" WHERE event_id = ?", ev.EventID).Exec(ctx)
		require.NoError(t, err, "bad row %d: %s", i, r.set)
		bad = append(bad, ev.EventID)
	}
	good = append(good, insertDead(t, db, "q1", "good.last", time.Minute).EventID)
	return bad, good
}

// TestBadRowsListed: rows with metadata that is not a JSON object of strings, or times that are not finite,
// are listed among the good ones, each marked with what is wrong; the good ones read as written.
func TestBadRowsListed(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	bad, good := insertBadRows(t, db)

	events, err := outboxOf(t, db).ListDead(ctx, 0)
	require.NoError(t, err)
	require.Len(t, events, len(bad)+len(good))
	byID := map[uuid.UUID]int{}
	for i, ev := range events {
		byID[ev.EventID] = i
	}
	for _, id := range good {
		ev := events[byID[id]]
		require.Empty(t, ev.Metadata["bunbox-bad-row"], "good row %s", ev.Name)
		require.False(t, ev.CreatedAt.IsZero())
		require.NotNil(t, ev.DeadAt)
	}
	for i, id := range bad {
		ev := events[byID[id]]
		problem := ev.Metadata["bunbox-bad-row"]
		require.Contains(t, problem, badRows[i].says, "bad row %d: %s", i, badRows[i].set)
		if strings.HasPrefix(badRows[i].set, "metadata") {
			require.Len(t, ev.Metadata, 1, "bad metadata is not passed on as metadata")
		}
	}
	require.True(t, events[byID[bad[5]]].CreatedAt.IsZero(), "a created_at of infinity reads as zero")
	require.Nil(t, events[byID[bad[6]]].DeadAt, "a dead_at of infinity reads as nil")

	// The rows still count, retry and purge.
	b, err := outboxOf(t, db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(bad)+len(good), b.Dead)
	n, err := outboxOf(t, db).RetryDead(ctx, bad[0])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestBadRowBlocksKey: a keyed dead row whose dead_at is infinity is still listed as blocking its key.
func TestBadRowBlocksKey(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	ev := insertDead(t, db, "q1", "keyed", time.Hour)
	_, err := db.NewRaw(`UPDATE outbox_events SET ordering_key = 'k1', dead_at = 'infinity', metadata = '{"k": 5}' WHERE event_id = ?`,
		ev.EventID).Exec(ctx)
	require.NoError(t, err)
	keys, err := outboxOf(t, db).BlockedKeys(ctx, 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, ev.EventID, keys[0].EventID)
	require.True(t, keys[0].DeadAt.IsZero())
}
