package ui_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/ui"
)

// TestBadRowsShown: a dead row whose metadata raw SQL wrote as a non-string, or whose times are not
// finite, does not fail the Dead view: the good rows are listed beside it, and its page shows it as bad.
func TestBadRowsShown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	c := f.client(t)
	_, err := f.db.NewRaw(`UPDATE outbox_events SET metadata = '{"k": 5}', dead_at = 'infinity' WHERE event_id = ?`, f.dead[0]).Exec(t.Context())
	require.NoError(t, err)
	_, err = f.db.NewRaw(`UPDATE outbox_events SET created_at = '-infinity' WHERE event_id = ?`, f.dead[1]).Exec(t.Context())
	require.NoError(t, err)

	resp, body := c.get("/events?state=dead")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, f.dead[0].String())
	require.Contains(t, body, f.dead[1].String())

	resp, body = c.get("/event?id=" + f.dead[0].String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "bunbox-bad-row")
	require.Contains(t, body, `metadata {&#34;k&#34;: 5} is not a JSON object of strings; dead_at is infinity`)

	resp, body = c.get("/event?id=" + f.dead[1].String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "created_at is -infinity")
}
