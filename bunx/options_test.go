package bunx_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/model"
)

// Record writes the delivery options into their columns, and bun reads them back; an event without
// options leaves the columns NULL.
func TestRecordKeepsDeliveryOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	at := time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC)
	with, err := model.NewEvent("cart.remind", nil, model.WithProcessAt(at), model.WithMaxRetry(0),
		model.WithTimeout(90*time.Second), model.WithDeadline(at.Add(time.Hour)), model.WithGroup("digest"),
		model.WithTaskRetention(48*time.Hour))
	require.NoError(t, err)
	without, err := model.NewEvent("cart.remind", nil)
	require.NoError(t, err)
	require.NoError(t, b.ob.Record(ctx, b.db, with, without))

	evs := b.events(t)
	require.Len(t, evs, 2)
	got := evs[0]
	require.True(t, at.Equal(*got.ProcessAt))
	require.Equal(t, 0, *got.MaxRetry)
	require.Equal(t, 90*time.Second, got.Timeout)
	require.True(t, at.Add(time.Hour).Equal(*got.Deadline))
	require.Equal(t, "digest", got.Group)
	require.Equal(t, 48*time.Hour, got.TaskRetention)

	got = evs[1]
	require.Nil(t, got.ProcessAt)
	require.Nil(t, got.MaxRetry)
	require.Zero(t, got.Timeout)
	require.Nil(t, got.Deadline)
	require.Empty(t, got.Group)
	require.Zero(t, got.TaskRetention)
	var nulls int
	require.NoError(t, b.db.NewRaw(`SELECT count(*) FROM outbox_events WHERE id = ? AND process_at IS NULL AND max_retry IS NULL
  AND timeout_ns IS NULL AND deadline IS NULL AND task_group IS NULL AND retention_ns IS NULL`, without.ID).Scan(ctx, &nulls))
	require.Equal(t, 1, nulls)

	// An event built by hand with a nonsense option is refused, and nothing is written.
	bad, err := model.NewEvent("cart.remind", nil)
	require.NoError(t, err)
	bad.Timeout = time.Millisecond
	require.ErrorIs(t, b.ob.Record(ctx, b.db, bad), model.ErrInvalidEvent)
	require.Len(t, b.events(t), 2)
}
