package ui_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/ui"
)

// TestHistory: the history page charts, per minute of the window, the per-row rows by publish time with
// their lag, the dead rows by dead time and the streamed rows the cursor delivered by commit time, as
// inline SVG with no style attribute (the CSP allows none); rows outside the window are left out, a
// window out of 1..48 hours is refused, and the page says that failures per minute are not recorded.
func TestHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	c := f.client(t)
	for _, at := range []string{"2 minutes", "2 minutes", "3 hours"} { // two published in the window, one 3 h ago
		_, err := f.db.ExecContext(t.Context(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, created_at, published_at)
VALUES (gen_random_uuid(), 'order.placed', 'default', '{}', now() - interval '`+at+`' - interval '5 seconds', now() - interval '`+at+`')`)
		require.NoError(t, err)
	}
	require.NoError(t, relay.EnableStream(t.Context(), f.db, model.Location{}))
	f.insertStreamRow(t, "stream.delivered", "NULL")
	outboxtest.DeliverStream(t, f.db)
	f.insertStreamRow(t, "stream.waiting", "NULL")

	resp, body := c.get("/history?hours=1")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `<span id="total-published">2</span>`, "the rows published in the last hour")
	require.Contains(t, body, `<span id="total-dead">2</span>`)
	require.Contains(t, body, `<span id="total-streamed">1</span>`, "the delivered streamed row, not the waiting one")
	require.Contains(t, body, `<span id="lag-max">5s</span>`)
	require.Contains(t, body, `<svg class="chart"`)
	require.Contains(t, body, `<polyline class="s-published" points="`)
	require.Contains(t, body, `<polyline class="s-dead" points="`)
	require.Contains(t, body, `id="no-failures"`, "the page says failures per minute are not recorded")
	require.NotContains(t, body, "style=", "the CSP allows no style attribute")
	require.NotContains(t, body, "<script")
	points := body[strings.Index(body, `class="s-published" points="`)+len(`class="s-published" points="`):]
	points = points[:strings.IndexByte(points, '"')]
	require.Len(t, strings.Fields(points), 61, "a point per minute of the hour and the one being read")

	_, body = c.get("/history")
	require.Contains(t, body, `<span id="total-published">3</span>`, "6 hours by default")

	for _, bad := range []string{"0", "49", "six", "-1"} {
		resp, body = c.get("/history?hours=" + bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		require.Contains(t, body, "hours must be a whole number of hours from 1 to 48")
	}
}
