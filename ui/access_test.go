package ui_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/ui"
)

// longEvent makes the fixture's first dead event long: a payload, a last error and a metadata value far
// past what the page shows truncated, each ending in a marker; and a reconciler's lease held by a host.
func (f *fixture) longEvent(t *testing.T) uuid.UUID {
	t.Helper()
	payload, err := json.Marshal(map[string]string{"card": strings.Repeat("p", 300) + "PAYLOAD-TAIL"})
	require.NoError(t, err)
	_, err = f.db.NewRaw(`UPDATE outbox_events SET payload = ?, last_error = ?, metadata = ? WHERE event_id = ?`,
		string(payload), strings.Repeat("e", 300)+"ERROR-TAIL", `{"trace":"`+strings.Repeat("m", 300)+`META-TAIL"}`, f.dead[0]).
		Exec(t.Context())
	require.NoError(t, err)
	_, err = f.db.NewRaw(`INSERT INTO bunbox_leases (name, holder, expires_at) VALUES ('bunbox.reconciler', 'LEASE-HOST:4242', now() + interval '1 hour')`).
		Exec(t.Context())
	require.NoError(t, err)
	return f.dead[0]
}

// requireNothingShown checks that an answer shows nothing of the outbox.
func requireNothingShown(t *testing.T, f *fixture, body string) {
	t.Helper()
	for _, secret := range []string{f.dead[0].String(), f.dead[1].String(), "PAYLOAD-TAIL", "ERROR-TAIL", "META-TAIL",
		"NOPERM", "LEASE-HOST", "order.placed", "alert(1)"} {
		require.NotContains(t, body, secret)
	}
}

// TestTokenGuardsReads: with a Token, every route but the sign-in and the stylesheet answers 401 without
// the token and shows nothing of the outbox: a browser gets the sign-in page, another client a basic-auth
// challenge. The token by basic auth (any user name) or a sign-in opens it, and such a reader sees the
// event's payload, last error and metadata in full; lists show them truncated.
func TestTokenGuardsReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Token: testToken})
	id := f.longEvent(t)
	c := f.client(t)

	for _, path := range []string{"/", "/events?state=dead", "/events?state=pending", "/event?id=" + id.String(), "/nowhere", "/events?state=bogus",
		"/search?q=" + id.String()} {
		resp, body := c.get(path)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		require.Equal(t, `Basic realm="bunbox ui", charset="UTF-8"`, resp.Header.Get("WWW-Authenticate"), path)
		require.Contains(t, body, `id="signin-needed"`, path)
		// the sign-in form returns to the page asked for: the id the client gave, nothing read
		requireNothingShown(t, f, strings.NewReplacer(`value="./event?id=`+id.String()+`"`, "",
			`value="./search?q=`+id.String()+`"`, "").Replace(body))
	}
	resp, body := c.getWith("/event?id="+id.String(), map[string]string{"Sec-Fetch-Mode": "navigate"})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Header.Get("WWW-Authenticate"), "a browser gets the sign-in form, not the basic-auth dialog")
	require.Contains(t, body, `name="back" value="./event?id=`+id.String()+`"`, "the sign-in returns to the page asked for")
	resp, _ = c.get("/assets/ui.css")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the stylesheet is open")
	resp, _ = c.post("/dead/purge", url.Values{"id": {id.String()}}, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	resp, body = c.getWith("/", map[string]string{"Authorization": basic("ops", "wrong-token-of-enough-length")})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	requireNothingShown(t, f, body)
	resp, body = c.getWith("/event?id="+id.String(), map[string]string{"Authorization": basic("any-name", testToken)})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	requireFull(t, body)
	resp, body = c.getWith("/", map[string]string{"Authorization": basic("", testToken)})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "LEASE-HOST:4242")
	resp, body = c.getWith("/events?state=dead", map[string]string{"Authorization": basic("", testToken)})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, id.String())
	require.Contains(t, body, strings.Repeat("e", 100))
	require.NotContains(t, body, "ERROR-TAIL", "a list shows the last error truncated")
	require.NotContains(t, body, `type="checkbox"`, "basic auth reads; writes need a sign-in")

	c.signIn()
	_, body = c.get("/event?id=" + id.String())
	requireFull(t, body)
	_, body = c.get("/events?state=dead")
	require.Contains(t, body, `type="checkbox"`)
	require.NotContains(t, body, "ERROR-TAIL", "a list shows the last error truncated, signed in too")
	require.NotContains(t, f.logText(), testToken)
}

// TestOpenReads: Config.OpenReads with a Token lets anyone read the page, truncated: no payload, last
// error or metadata past 120 characters, no lease holder; signing in shows them in full. Without a Token
// the page is open and truncated the same way, and says how to see it all.
func TestOpenReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Token: testToken, OpenReads: true})
	id := f.longEvent(t)
	c := f.client(t)

	resp, body := c.get("/")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `<span class="n" id="dead">2</span>`)
	require.NotContains(t, body, "LEASE-HOST", "the lease holder names a host and pid")
	require.Contains(t, body, "Lease held by a relay until")
	resp, body = c.get("/event?id=" + id.String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	requireTruncated(t, body)
	require.Contains(t, body, "sign in with the token to see it all")

	c.signIn()
	_, body = c.get("/event?id=" + id.String())
	requireFull(t, body)
	_, body = c.get("/")
	require.Contains(t, body, "LEASE-HOST:4242")

	open := newFixture(t, ui.Config{})
	open.longEvent(t)
	resp, body = open.client(t).get("/event?id=" + open.dead[0].String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	requireTruncated(t, body)
	require.Contains(t, body, "start it with one")
}

func requireFull(t *testing.T, body string) {
	t.Helper()
	for _, tail := range []string{"PAYLOAD-TAIL", "ERROR-TAIL", "META-TAIL"} {
		require.Contains(t, body, tail, "shown in full to a reader with the token")
	}
	require.NotContains(t, body, `id="truncated"`)
}

func requireTruncated(t *testing.T, body string) {
	t.Helper()
	require.Contains(t, body, strings.Repeat("p", 100), "the start of the payload")
	for _, tail := range []string{"PAYLOAD-TAIL", "ERROR-TAIL", "META-TAIL"} {
		require.NotContains(t, body, tail, "truncated for a reader without the token")
	}
	require.Contains(t, body, `id="truncated"`)
}

func basic(user, password string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, password)
	return r.Header.Get("Authorization")
}

// TestDatabaseErrorsOnlyToReaders: a database error (which can name the user, the database and its
// host) reaches the page only for a reader with the token; others read that the log says why.
func TestDatabaseErrorsOnlyToReaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	for _, cfg := range []ui.Config{{}, {Token: testToken, OpenReads: true}} {
		cfg.Location.Schema = "never_migrated_ui" // a schema without the outbox: every read fails
		cfg.Logger = slog.New(slog.NewTextHandler(syncWriter{&sync.Mutex{}, &strings.Builder{}}, nil))
		h, err := ui.New(f.db, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.Close() })
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		c := (&fixture{db: f.db, srv: srv}).client(t)

		resp, body := c.get("/events?state=dead")
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
		require.Equal(t, "ui: the outbox could not be read; the server's log says why\n", body)
		if cfg.Token != "" {
			_, body = c.getWith("/events?state=dead", map[string]string{"Authorization": basic("", testToken)})
			require.Contains(t, body, "never_migrated_ui", "the reader with the token sees the error")
		}
	}
}
