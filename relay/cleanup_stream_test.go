package relay

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

// opsInsertRow writes one row of queue with the table's defaults (a streamed row while the stream is on),
// created createdAgo ago, with a process_at processIn from now when that is not zero, and returns its
// event id. (bun's insert of a model.Event would read published_at back: 'infinity' for a streamed row.)
func opsInsertRow(t testing.TB, db bun.IDB, queue string, createdAgo, processIn time.Duration) uuid.UUID {
	t.Helper()
	id := uuid.New()
	var processAt *time.Time
	if processIn != 0 {
		at := time.Now().Add(processIn)
		processAt = &at
	}
	_, err := db.ExecContext(context.Background(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, created_at, process_at)
VALUES (?, 'test.event', ?, '{}', now() - make_interval(secs => ?::float8), ?)`, id, queue, createdAgo.Seconds(), processAt)
	require.NoError(t, err)
	return id
}

func opsExists(t testing.TB, db bun.IDB, id uuid.UUID) bool {
	t.Helper()
	return outboxtest.Count(t, db, "outbox_events", "event_id = ?", id) == 1
}

// Cleanup deletes the delivered streamed rows created before the retention, a batch at a time, and never a
// waiting one however old, nor a delivered one with a ProcessAt ahead or created within the retention. It
// stops at a batch that ends with a row created within the retention (CleanupBatchSize 2 here: the
// three young rows end the fourth batch), leaving an old row written after them to a later cleanup.
func TestCleanupStreamedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	classic := opsInsertRow(t, b.db, b.queue, 3*time.Hour, 0)
	_, err := b.db.ExecContext(ctx, `UPDATE outbox_events SET published_at = now() - interval '2 hours' WHERE event_id = ?`, classic)
	require.NoError(t, err)
	require.NoError(t, EnableStream(ctx, b.db, model.Location{}))

	var old []uuid.UUID
	for range 5 {
		old = append(old, opsInsertRow(t, b.db, b.queue, 2*time.Hour, 0))
	}
	scheduled := opsInsertRow(t, b.db, b.queue, 2*time.Hour, time.Hour)
	young := opsInsertRow(t, b.db, b.queue, 0, 0)
	opsInsertRow(t, b.db, b.queue, 0, 0)
	opsInsertRow(t, b.db, b.queue, 0, 0)
	oldAfterYoung := opsInsertRow(t, b.db, b.queue, 2*time.Hour, 0) // a transaction that began long before it wrote
	outboxtest.DeliverStream(t, b.db)
	waiting := opsInsertRow(t, b.db, b.queue, 2*time.Hour, 0)

	r := b.newRelay(t, Config{PublishedRetention: time.Hour, CleanupBatchSize: 2})
	n, err := r.cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 6, n, "the classic row and the five old delivered streamed rows")
	require.EqualValues(t, 6, r.Stats().Cleaned)
	for _, id := range append(old, classic) {
		require.False(t, opsExists(t, b.db, id))
	}
	require.True(t, opsExists(t, b.db, waiting), "a waiting streamed row is never deleted")
	require.True(t, opsExists(t, b.db, scheduled), "its ProcessAt is ahead")
	require.True(t, opsExists(t, b.db, young), "created within the retention")
	require.True(t, opsExists(t, b.db, oldAfterYoung), "read after a row created within the retention: a later cleanup's")

	outboxtest.DeliverStream(t, b.db)
	_, err = b.db.ExecContext(ctx, `UPDATE outbox_events SET created_at = now() - interval '2 hours' WHERE created_at > now() - interval '1 hour'`)
	require.NoError(t, err)
	n, err = r.cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "the three young rows (now old), the row after them, and the formerly waiting row, delivered now")
	require.True(t, opsExists(t, b.db, scheduled))
	require.EqualValues(t, 1, outboxtest.Count(t, b.db, "outbox_events", ""))
}

// Cleanup with the stream never turned on deletes what it always did (there is no cursor row).
func TestCleanupStreamNeverOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := opsInsertRow(t, b.db, b.queue, 2*time.Hour, 0)
	_, err := b.db.ExecContext(ctx, `UPDATE outbox_events SET published_at = 'infinity' WHERE event_id = ?`, id)
	require.NoError(t, err)
	r := b.newRelay(t, Config{PublishedRetention: time.Hour})
	n, err := r.cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a streamed row with no cursor row was never delivered")
	require.True(t, opsExists(t, b.db, id))
}
