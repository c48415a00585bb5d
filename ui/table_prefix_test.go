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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/ui"
)

// TestPageOfTablePrefix: a Handler with Config.Location (Schema and TablePrefix) shows and retries the dead
// events of that prefix's outbox only, and shows the reconciler's lease of its own leases table; the
// default outbox's dead events (newFixture's) are not on its page and stay dead.
func TestPageOfTablePrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, ui.Config{}) // two dead events in the default outbox
	s := outboxtest.TenantSchema(t, f.db, "tenant_ui_p_")
	outboxtest.TenantTables(t, f.db, s, "orders_")
	table := `"` + s + `".orders_outbox_events`
	ev, err := model.NewEvent("orders.only", nil)
	require.NoError(t, err)
	require.NoError(t, bunx.New(f.db, bunx.WithLocation(model.Location{Schema: s, TablePrefix: "orders_"})).Record(ctx, f.db, ev))
	_, err = f.db.NewRaw(`UPDATE `+table+` SET published_at = NULL, dead_at = now(), attempts = 3, last_error = 'boom' WHERE event_id = ?`, ev.EventID).Exec(ctx)
	require.NoError(t, err)
	_, err = f.db.NewRaw(`INSERT INTO "`+s+`".orders_bunbox_leases (name, holder, expires_at) VALUES ('bunbox.reconciler', 'orders-host-1', ?)`,
		time.Now().Add(time.Hour)).Exec(ctx)
	require.NoError(t, err)

	h, err := ui.New(f.db, ui.Config{Location: model.Location{Schema: s, TablePrefix: "orders_"}, Token: testToken,
		Logger: slog.New(slog.NewTextHandler(syncWriter{&sync.Mutex{}, &strings.Builder{}}, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tf := &fixture{db: f.db, srv: srv}
	c := tf.client(t)
	c.signIn() // the token guards reads too

	_, body := c.get("/")
	require.Contains(t, body, "orders-host-1", "the reconciler's lease of the prefix's leases table")
	_, body = c.get("/events?state=dead")
	require.Contains(t, body, ev.EventID.String())
	require.Contains(t, body, "orders.only")
	for _, id := range f.dead {
		require.NotContains(t, body, id.String(), "another outbox's dead event")
	}
	_, body = c.get("/event?id=" + ev.EventID.String())
	require.Contains(t, body, "boom")

	// A row waiting in the prefix's stream (no relay runs) is listed as pending: the list reads the
	// prefix's cursors, not the default outbox's.
	waiting, err := model.NewEvent("orders.waiting", nil)
	require.NoError(t, err)
	require.NoError(t, bunx.New(f.db, bunx.WithLocation(model.Location{Schema: s, TablePrefix: "orders_"})).Record(ctx, f.db, waiting))
	_, body = c.get("/events?state=pending")
	require.Contains(t, body, waiting.EventID.String())

	_, body = c.get("/events?state=dead")
	resp, _ := c.post("/dead/retry", url.Values{"id": {ev.EventID.String(), f.dead[0].String()}, "csrf": {csrfOf(t, body)}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var stillDead int
	require.NoError(t, f.db.NewRaw(`SELECT count(*) FROM `+table+` WHERE dead_at IS NOT NULL`).Scan(ctx, &stillDead))
	require.Zero(t, stillDead, "the prefix's event is retried")
	require.EqualValues(t, 2, f.deadCount(t), "the default outbox's dead events are untouched")

	_, err = ui.New(f.db, ui.Config{Location: model.Location{TablePrefix: "Orders"}})
	require.ErrorIs(t, err, ui.ErrInvalidConfig)
	require.ErrorContains(t, err, `Location.TablePrefix: invalid table prefix "Orders"`)
}
