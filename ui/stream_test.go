package ui_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/ui"
)

// insertStreamRow writes an event with the table's defaults (a streamed row while the stream is on).
func (f *fixture) insertStreamRow(t *testing.T, name, extra string) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := f.db.ExecContext(t.Context(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, process_at)
VALUES (?, ?, 'bulk', '{}', `+extra+`)`, id, name)
	require.NoError(t, err)
	return id
}

// The page counts a streamed row the cursor has not passed as pending and lists it so; a delivered one
// is not pending, shows the cursor's move as its published time, and is looked up in asynq.
func TestStreamedRowsOnThePage(t *testing.T) {
	t.Parallel()
	opt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr(), DB: 11}
	f := newFixture(t, ui.Config{Redis: opt})
	c := f.client(t)
	_, body := c.get("/")
	if !outboxtest.StreamOff() {
		require.Contains(t, body, `<td id="stream-on">on</td>`, "on from the migrations")
	}
	require.Contains(t, body, "<td>outbox_events</td>", "the one lane, named by its table")
	require.NoError(t, relay.EnableStream(t.Context(), f.db, model.Location{}))
	delivered := f.insertStreamRow(t, "stream.delivered", "NULL")
	scheduled := f.insertStreamRow(t, "stream.scheduled", "now() + interval '1 hour'")
	outboxtest.DeliverStream(t, f.db)
	waiting := f.insertStreamRow(t, "stream.waiting", "NULL")

	resp, body := c.get("/")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `<span class="n" id="pending">2</span>`, "the fixture's pending row and the waiting streamed row")
	require.Contains(t, body, `<td id="stream-on">on</td>`)
	require.Contains(t, body, `<td id="stream-waiting">1</td>`, "the waiting streamed row")
	require.Contains(t, body, " ago</td>", "when the cursor moved")

	_, body = c.get("/events?state=pending")
	require.Contains(t, body, waiting.String())
	require.Contains(t, body, "cart.remind")
	require.NotContains(t, body, delivered.String())
	_, body = c.get("/events?state=scheduled")
	require.Contains(t, body, scheduled.String())
	require.NotContains(t, body, waiting.String())

	resp, body = c.get("/event?id=" + waiting.String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "waiting in the stream")
	require.NotContains(t, body, "infinity")
	resp, body = c.get("/event?id=" + delivered.String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "delivered by the stream, at or before 20")
	require.Contains(t, body, "not in asynq: completed and past its retention, deleted, or lost", "looked up in asynq")
	require.NotContains(t, body, "infinity")
}
