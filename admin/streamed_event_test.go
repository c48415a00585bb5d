package admin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// TestStreamedEventReadsBack: a row written while the stream is on has published_at 'infinity'; a plain
// bun select of model.Event reads it (model.Event's BeforeSelect hook), PublishedAt nil, and so do the
// select users wrote before the hook and the operator's views (ListDead through internal/badrow).
func TestStreamedEventReadsBack(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	require.NoError(t, relay.EnableStream(ctx, db, model.Location{}))
	ev, err := model.NewEvent("order.placed", map[string]int{"n": 1}, model.WithMetadata("tenant", "a"))
	require.NoError(t, err)
	_, err = db.NewInsert().Model(ev).Returning("id").Exec(ctx) // bunx.Outbox.Record reads back only what it sets
	require.NoError(t, err)
	require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", "published_at = 'infinity'"), "the row is in the stream")

	var plain model.Event
	require.NoError(t, db.NewSelect().Model(&plain).Where("event_id = ?", ev.EventID).Scan(ctx))
	require.Equal(t, ev.EventID, plain.EventID)
	require.Nil(t, plain.PublishedAt)

	var got []model.Event
	require.NoError(t, db.NewSelect().Model(&got).
		ExcludeColumn("published_at").ColumnExpr("nullif(published_at, 'infinity') AS published_at").
		Where("event_id = ?", ev.EventID).Scan(ctx))
	require.Len(t, got, 1)
	require.Equal(t, ev.EventID, got[0].EventID)
	require.Nil(t, got[0].PublishedAt)
	require.Equal(t, map[string]string{"tenant": "a"}, got[0].Metadata)

	_, err = db.NewRaw("UPDATE outbox_events SET dead_at = now() WHERE event_id = ?", ev.EventID).Exec(ctx)
	require.NoError(t, err)
	dead, err := outboxOf(t, db).ListDead(ctx, 0)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Nil(t, dead[0].PublishedAt)
	require.Empty(t, dead[0].Metadata["bunbox-bad-row"], "a streamed row is no bad row")
}
