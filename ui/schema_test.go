package ui_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/ui"
)

// TestPageOfSchema: a Handler with Config.Location.Schema shows and retries the dead events of that schema's
// outbox only; the default outbox's (newFixture's) are not on its page and stay dead.
func TestPageOfSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, ui.Config{}) // two dead events in the default outbox
	s := outboxtest.TenantSchema(t, f.db, "Tenant_UI_")
	ev, err := model.NewEvent("tenant.only", nil)
	require.NoError(t, err)
	require.NoError(t, bunx.New(f.db, bunx.WithLocation(model.Location{Schema: s})).Record(ctx, f.db, ev))
	_, err = f.db.NewRaw(`UPDATE "`+s+`".outbox_events SET published_at = NULL, dead_at = now(), attempts = 3, last_error = 'boom' WHERE event_id = ?`, ev.EventID).Exec(ctx)
	require.NoError(t, err)

	h, err := ui.New(f.db, ui.Config{Location: model.Location{Schema: s}, Token: testToken,
		Logger: slog.New(slog.NewTextHandler(syncWriter{&sync.Mutex{}, &strings.Builder{}}, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tf := &fixture{db: f.db, srv: srv}
	c := tf.client(t)
	c.signIn() // the token guards reads too

	_, body := c.get("/events?state=dead")
	require.Contains(t, body, ev.EventID.String())
	require.Contains(t, body, "tenant.only")
	for _, id := range f.dead {
		require.NotContains(t, body, id.String(), "another outbox's dead event")
	}
	_, body = c.get("/event?id=" + ev.EventID.String())
	require.Contains(t, body, "boom")

	_, body = c.get("/events?state=dead")
	resp, _ := c.post("/dead/retry", url.Values{"id": {ev.EventID.String(), f.dead[0].String()}, "csrf": {csrfOf(t, body)}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var stillDead int
	require.NoError(t, f.db.NewRaw(`SELECT count(*) FROM "`+s+`".outbox_events WHERE dead_at IS NOT NULL`).Scan(ctx, &stillDead))
	require.Zero(t, stillDead, "the schema's event is retried")
	require.EqualValues(t, 2, f.deadCount(t), "the default outbox's dead events are untouched")

	_, err = ui.New(f.db, ui.Config{Location: model.Location{Schema: `a"b`}})
	require.ErrorIs(t, err, ui.ErrInvalidConfig)
	require.ErrorContains(t, err, `Location.Schema: invalid schema name "a\"b"`)
}
