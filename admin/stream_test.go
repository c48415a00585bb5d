package admin

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// insertStreamed writes one row with the table's defaults (a streamed row while the stream is on), with a
// process_at in the given time from now when processIn is not zero.
func insertStreamed(t testing.TB, db bun.IDB, name string, processIn time.Duration) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, process_at)
VALUES (gen_random_uuid(), ?, 'q1', '{}', CASE WHEN ?::bigint = 0 THEN NULL ELSE now() + make_interval(secs => ?::bigint) END)`,
		name, int64(processIn.Seconds()), int64(processIn.Seconds()))
	require.NoError(t, err)
}

// TestBacklogCountsStreamedRows: a streamed row the cursor has not passed is pending (with its age), one it
// has passed is not; a delivered streamed row with a ProcessAt ahead is scheduled; ReadStream tells the
// cursor's state.
func TestBacklogCountsStreamedRows(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)

	st, err := outboxOf(t, db).ReadStream(ctx)
	require.NoError(t, err)
	require.Equal(t, !outboxtest.StreamOff(), st.On, "on from the migrations (off in the BUNBOX_TEST_STREAM=off pass)")
	require.True(t, st.Cursor)
	require.Zero(t, st.Waiting)

	require.NoError(t, relay.EnableStream(ctx, db, model.Location{}))
	insertStreamed(t, db, "delivered", 0)
	insertStreamed(t, db, "later", time.Hour)
	outboxtest.DeliverStream(t, db)
	insertStreamed(t, db, "waiting", 0)
	insertStreamed(t, db, "waiting.later", time.Hour)
	_, err = db.ExecContext(ctx, "UPDATE outbox_events SET created_at = now() - interval '1 minute' WHERE event_name = 'waiting'")
	require.NoError(t, err)

	b, err := outboxOf(t, db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, b.Pending, "the two waiting rows")
	require.GreaterOrEqual(t, b.Lag, time.Minute, "the oldest waiting row's age")
	require.EqualValues(t, 1, b.Scheduled, "the delivered row with a ProcessAt ahead; the waiting one is pending")

	by, err := outboxOf(t, db).ReadBacklogByEvent(ctx)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, e := range by {
		got[e.EventName] = e.Pending
		if e.EventName == "waiting" {
			require.GreaterOrEqual(t, e.Lag, time.Minute)
		}
	}
	require.Equal(t, map[string]int64{"waiting": 1, "waiting.later": 1}, got)

	st, err = outboxOf(t, db).ReadStream(ctx)
	require.NoError(t, err)
	require.True(t, st.On)
	require.True(t, st.Cursor)
	require.EqualValues(t, 2, st.Waiting)
	require.GreaterOrEqual(t, st.OldestWaiting, time.Minute)
	require.NotEmpty(t, st.WaitsForXID)

	outboxtest.DeliverStream(t, db)
	b, err = outboxOf(t, db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.Zero(t, b.Pending, "every streamed row delivered")
	require.Zero(t, b.Lag)
	require.EqualValues(t, 2, b.Scheduled)

	require.NoError(t, relay.DisableStream(ctx, db, model.Location{}))
	st, err = outboxOf(t, db).ReadStream(ctx)
	require.NoError(t, err)
	require.False(t, st.On)
	require.True(t, st.Cursor, "the cursor row stays, telling the delivered rows")
	require.Zero(t, st.Waiting)
}
