package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/ui"
)

// testToken is the token of the tests that write; long enough for the 16 characters a token needs.
const testToken = "s3cret-ui-token-for-tests"

// fixture is a page on a fresh schema: two dead events, one pending.
type fixture struct {
	db   *bun.DB
	h    *ui.Handler
	srv  *httptest.Server
	dead []uuid.UUID
	logs *strings.Builder
	mu   *sync.Mutex
}

func newFixture(t *testing.T, cfg ui.Config) *fixture {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	f := &fixture{db: db, logs: &strings.Builder{}, mu: &sync.Mutex{}}
	cfg.Logger = slog.New(slog.NewTextHandler(syncWriter{f.mu, f.logs}, nil))
	ctx := context.Background()
	for i, name := range []string{"order.placed", "invoice.sent", "cart.remind"} {
		ev, err := model.NewEvent(name, json.RawMessage(`{"note":"<script>alert(1)</script>","n":`+string(rune('0'+i))+`}`),
			model.WithQueue([]string{"default", "critical", "bulk"}[i]))
		require.NoError(t, err)
		_, err = db.NewInsert().Model(ev).Exec(ctx)
		require.NoError(t, err)
		if i < 2 {
			_, err = db.NewUpdate().Model((*model.Event)(nil)).
				Set("published_at = NULL, dead_at = now(), attempts = 10, last_error = ?", "enqueue: NOPERM this user has no permissions").
				Where("event_id = ?", ev.EventID).Exec(ctx)
			require.NoError(t, err)
			f.dead = append(f.dead, ev.EventID)
		}
	}
	// The fixture's rows are rows of the per-row path (the stream hands dead rows over), so that the stream's
	// tests below count only the streamed rows they write.
	_, err := db.ExecContext(ctx, "UPDATE outbox_events SET published_at = NULL WHERE published_at = 'infinity'")
	require.NoError(t, err)
	h, err := ui.New(db, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	f.h = h
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

// mounted serves the fixture's page on a service's mux under prefix ("/outbox"), as the package's
// example shows, and returns a client of that server whose paths start with the prefix.
func (f *fixture) mounted(t *testing.T, prefix string) *client {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", http.StripPrefix(prefix, f.h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := f.client(t)
	c.base = srv.URL
	return c
}

// deadCount counts the rows still dead.
func (f *fixture) deadCount(t *testing.T) int64 {
	t.Helper()
	return outboxtest.Count(t, f.db, "outbox_events", "dead_at IS NOT NULL")
}

// client is a browser-like client: it keeps cookies and sends the headers a same-origin form post has.
type client struct {
	t    *testing.T
	base string
	c    *http.Client
}

func (f *fixture) client(t *testing.T) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: f.srv.URL, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (c *client) get(path string) (*http.Response, string) {
	c.t.Helper()
	return c.getWith(path, nil)
}

// getWith is get with headers.
func (c *client) getWith(path string, headers map[string]string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.c.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(b)
}

// post sends a form as a browser would from the page itself (Sec-Fetch-Site: same-origin), unless
// headers say otherwise.
func (c *client) post(path string, form url.Values, headers map[string]string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.c.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(b)
}

// signIn signs the client in with testToken.
func (c *client) signIn() {
	c.t.Helper()
	resp, body := c.post("/login", url.Values{"token": {testToken}}, nil)
	require.Equal(c.t, http.StatusSeeOther, resp.StatusCode, body)
}

// csrfOf reads the CSRF token from a page's forms.
func csrfOf(t *testing.T, body string) string {
	t.Helper()
	const marker = `name="csrf" value="`
	i := strings.Index(body, marker)
	require.NotEqual(t, -1, i, "the page has no CSRF field: not signed in?")
	rest := body[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

// syncWriter makes a strings.Builder safe for the handler's concurrent log lines.
type syncWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (f *fixture) logText() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logs.String()
}
