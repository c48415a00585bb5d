package ui_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/ui"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := ui.New(&bun.DB{}, ui.Config{Token: "short"})
	require.ErrorIs(t, err, ui.ErrInvalidConfig)
	require.ErrorContains(t, err, "Token must be at least 16 characters, got 5")
	require.NotContains(t, err.Error(), "short", "the token itself is never in an error")
	// characters, not bytes: 15 two-byte runes are 30 bytes but too short
	_, err = ui.New(&bun.DB{}, ui.Config{Token: "äöüßéèêëàáâãåçñ"})
	require.ErrorContains(t, err, "Token must be at least 16 characters, got 15")
	// a long token of one character, or of a few, is guessable
	for _, weak := range []string{"aaaaaaaaaaaaaaaa", "abababababababababab", "abcdeabcdeabcdeabcde"} {
		_, err = ui.New(&bun.DB{}, ui.Config{Token: weak})
		require.ErrorIs(t, err, ui.ErrInvalidConfig, weak)
		require.ErrorContains(t, err, "Token must have at least 6 distinct characters", weak)
		require.NotContains(t, err.Error(), weak, "the token itself is never in an error")
	}
	_, err = ui.New(&bun.DB{}, ui.Config{Token: "\xff\xfe" + testToken})
	require.ErrorContains(t, err, "Token must be valid UTF-8")
	_, err = ui.New(&bun.DB{}, ui.Config{ListLimit: 5000})
	require.ErrorContains(t, err, "ListLimit must be between 1 and 1000")
	_, err = ui.New(nil, ui.Config{})
	require.ErrorContains(t, err, "db is nil")
}

// The page shows the backlog, the dead events with their last error and the payload, escaped, under a
// strict Content-Security-Policy, and without a token it writes nothing.
func TestReadOnlyPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	c := f.client(t)

	resp, body := c.get("/")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.NotContains(t, resp.Header.Get("Content-Security-Policy"), "script-src", "no script is allowed at all")
	require.Contains(t, body, `<span class="n" id="dead">2</span>`)
	require.Contains(t, body, `<span class="n" id="pending">1</span>`)
	require.Contains(t, body, "read-only")
	require.Contains(t, body, "asynq's side is not shown")
	require.NotContains(t, body, "<script", "the page has no script")

	_, body = c.get("/events?state=dead")
	require.Contains(t, body, "NOPERM this user has no permissions")
	require.NotContains(t, body, `type="checkbox"`, "nothing to select on a read-only page")

	_, body = c.get("/event?id=" + f.dead[0].String())
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;", "the payload is shown escaped")
	require.NotContains(t, body, "<script>alert(1)")

	resp, _ = c.post("/dead/retry", url.Values{"id": {f.dead[0].String()}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = c.post("/login", url.Values{"token": {"anything-at-all-here"}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.EqualValues(t, 2, f.deadCount(t), "a read-only page changed nothing")
	require.Contains(t, f.logText(), "write refused")

	resp, _ = c.get("/events?state=bogus")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = c.get("/event?id=" + "00000000-0000-0000-0000-000000000000")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// Every write needs the token (a session), the session's CSRF token and a same-origin request; each
// refusal changes nothing, and a write that passes is logged.
func TestWritesAreGuarded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Token: testToken})
	c := f.client(t)
	id := url.Values{"id": {f.dead[0].String()}}

	resp, _ := c.post("/dead/retry", id, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "not signed in")

	resp, _ = c.post("/login", url.Values{"token": {"wrong-token-of-enough-length"}}, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = c.post("/login", url.Values{"token": {testToken}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-site sign-in is refused")
	resp, _ = c.post("/login", url.Values{"token": {testToken}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cookie := resp.Header.Get("Set-Cookie")
	require.Contains(t, cookie, "HttpOnly")
	require.Contains(t, cookie, "SameSite=Strict")
	require.NotContains(t, cookie, testToken, "the cookie is a session id, not the token")

	_, body := c.get("/events?state=dead")
	require.Contains(t, body, `type="checkbox"`)
	require.NotContains(t, body, testToken, "the token is never rendered")
	csrf := csrfOf(t, body)

	resp, _ = c.post("/dead/retry", id, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	withCSRF := url.Values{"id": {f.dead[0].String()}, "csrf": {csrf}}
	resp, _ = c.post("/dead/retry", withCSRF, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "cross-site")
	resp, _ = c.post("/dead/retry", withCSRF, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another origin")
	require.EqualValues(t, 2, f.deadCount(t), "every refused write changed nothing")

	resp, _ = c.post("/dead/retry", withCSRF, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.EqualValues(t, 1, f.deadCount(t), "the selected event is back in line")
	require.Contains(t, f.logText(), "ui: dead events retried")
	require.Contains(t, f.logText(), f.dead[0].String())

	resp, _ = c.post("/dead/purge", url.Values{"id": {f.dead[1].String()}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.EqualValues(t, 0, f.deadCount(t))
	require.EqualValues(t, 2, outboxtest.Count(t, f.db, "outbox_events", ""), "purge deleted the one dead event only")
	require.NotContains(t, f.logText(), testToken, "the token never reaches the log")

	resp, _ = c.post("/logout", url.Values{"csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = c.post("/dead/retry", withCSRF, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "signed out")
}

// With Redis, the page shows asynq's queues and the task of a published event.
func TestAsynqSide(t *testing.T) {
	t.Parallel()
	opt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr(), DB: 11}
	rc := asynq.NewClient(opt)
	defer rc.Close()
	f := newFixture(t, ui.Config{Redis: opt})
	c := f.client(t)
	// the pending event, published by hand: enqueued with its id, and marked.
	var id string
	require.NoError(t, f.db.NewRaw("SELECT event_id::text FROM outbox_events WHERE dead_at IS NULL").Scan(t.Context(), &id))
	_, err := rc.Enqueue(asynq.NewTask("cart.remind", nil), asynq.TaskID(id), asynq.Queue("bulk"))
	if err != nil {
		require.ErrorIs(t, err, asynq.ErrTaskIDConflict, "left by an earlier run")
	}
	_, err = f.db.NewRaw("UPDATE outbox_events SET published_at = now() WHERE event_id = ?", id).Exec(t.Context())
	require.NoError(t, err)

	_, body := c.get("/")
	require.Contains(t, body, "<th>asynq pending</th>")
	require.NotContains(t, body, "asynq could not be read")
	_, body = c.get("/event?id=" + id)
	require.Contains(t, body, `<dd id="task-state">pending</dd>`)
}
