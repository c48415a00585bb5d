package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

func TestEnableStreamSetsTheDefaults(t *testing.T) {
	outboxtest.SkipShort(t)
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	on, err := StreamEnabled(ctx, db, model.Location{})
	require.NoError(t, err)
	require.Equal(t, !outboxtest.StreamOff(), on, "on from the migrations")
	require.NoError(t, DisableStream(ctx, db, model.Location{}))
	on, err = StreamEnabled(ctx, db, model.Location{})
	require.NoError(t, err)
	require.False(t, on)

	require.NoError(t, EnableStream(ctx, db, model.Location{}))
	require.NoError(t, EnableStream(ctx, db, model.Location{}), "idempotent")
	on, err = StreamEnabled(ctx, db, model.Location{})
	require.NoError(t, err)
	require.True(t, on)
	_, err = db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload) VALUES (gen_random_uuid(), 'a', '{}')`)
	require.NoError(t, err)
	require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", "published_at = 'infinity' AND xid IS NOT NULL"))

	require.NoError(t, DisableStream(ctx, db, model.Location{}))
	require.NoError(t, DisableStream(ctx, db, model.Location{}), "idempotent")
	on, err = StreamEnabled(ctx, db, model.Location{})
	require.NoError(t, err)
	require.False(t, on)
	require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", "published_at IS NULL"), "the undelivered row is pending again")
}
