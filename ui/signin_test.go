package ui_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/ui"
)

// TestSignInThrottle: after 5 wrong tokens a client gets 429 with Retry-After, even with the right token
// and by basic auth, while another client still signs in; after 30 wrong tokens from any clients every
// client gets 429. The wrong tokens write one Warn line, not one each. (The throttle's clock is frozen:
// nothing refills while the test runs.)
func TestSignInThrottle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Token: testToken, TrustProxy: true})
	ui.FreezeThrottle(f.h, time.Now())
	c := f.client(t)
	from := func(client string) map[string]string {
		return map[string]string{"X-Forwarded-For": "203.0.113.9, " + client}
	}
	wrong := url.Values{"token": {"wrong-token-of-enough-length"}}
	right := url.Values{"token": {testToken}}

	for range 5 {
		resp, _ := c.post("/login", wrong, from("198.51.100.1"))
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	resp, body := c.post("/login", right, from("198.51.100.1"))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	h := from("198.51.100.1")
	h["Authorization"] = basic("", testToken)
	resp, _ = c.getWith("/", h)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "basic auth is throttled too")

	other := f.client(t)
	resp, _ = other.post("/login", right, from("198.51.100.2"))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "another client is not throttled")

	for i := range 25 { // 30 wrong tokens in all
		client := "198.51.100." + strconv.Itoa(10+i/5)
		if i%2 == 0 {
			resp, _ = c.post("/login", wrong, from(client))
		} else {
			hb := from(client)
			hb["Authorization"] = basic("x", "wrong-token-of-enough-length")
			resp, _ = c.getWith("/", hb)
		}
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, i)
	}
	resp, _ = f.client(t).post("/login", right, from("198.51.100.99"))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the Handler's budget of wrong tokens is spent")

	logs := f.logText()
	require.Equal(t, 1, strings.Count(logs, "sign-in refused"), logs)
	require.Contains(t, logs, "level=WARN")
	require.NotContains(t, logs, testToken)
	require.NotContains(t, logs, "wrong-token-of-enough-length", "a wrong token is never logged")
}

// TestThrottleIgnoresForwardedForByDefault: without TrustProxy a client's X-Forwarded-For is not
// believed, so changing it does not escape the throttle.
func TestThrottleIgnoresForwardedForByDefault(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Token: testToken})
	ui.FreezeThrottle(f.h, time.Now())
	c := f.client(t)
	for i := range 5 {
		resp, _ := c.post("/login", url.Values{"token": {"wrong-token-of-enough-length"}}, map[string]string{"X-Forwarded-For": "192.0.2." + strconv.Itoa(i)})
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	resp, _ := c.post("/login", url.Values{"token": {testToken}}, map[string]string{"X-Forwarded-For": "192.0.2.200"})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
}

// TestSecureCookie: the session cookie is Secure on a TLS connection, and behind a proxy that says
// X-Forwarded-Proto: https when the Handler trusts it (TrustProxy); not otherwise.
func TestSecureCookie(t *testing.T) {
	t.Parallel()
	db := outboxtest.Open(t, nil) // a sign-in reads nothing
	cookieOf := func(cfg ui.Config, tls bool, proto string) string {
		t.Helper()
		cfg.Token = testToken
		cfg.Logger = slog.New(slog.NewTextHandler(syncWriter{&sync.Mutex{}, &strings.Builder{}}, nil))
		h, err := ui.New(db, cfg)
		require.NoError(t, err)
		defer h.Close()
		srv := httptest.NewUnstartedServer(h)
		if tls {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		defer srv.Close()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/login", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		cl := srv.Client()
		cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := cl.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		return resp.Header.Get("Set-Cookie")
	}
	require.Contains(t, cookieOf(ui.Config{}, true, ""), "; Secure")
	require.Contains(t, cookieOf(ui.Config{TrustProxy: true}, false, "https"), "; Secure")
	require.Contains(t, cookieOf(ui.Config{TrustProxy: true}, false, "https, http"), "; Secure")
	require.NotContains(t, cookieOf(ui.Config{TrustProxy: true}, false, "http"), "Secure")
	require.NotContains(t, cookieOf(ui.Config{}, false, "https"), "Secure", "X-Forwarded-Proto is believed only with TrustProxy")
	require.NotContains(t, cookieOf(ui.Config{}, false, ""), "Secure")
}

// TestRefusedWritesLogALineAMinute: a flood of refused writes writes one Warn line with the count, not
// one each.
func TestRefusedWritesLogALineAMinute(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{}) // read-only: every write is refused
	c := f.client(t)
	for range 20 {
		resp, _ := c.post("/dead/purge", url.Values{"id": {f.dead[0].String()}}, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	}
	require.Equal(t, 1, strings.Count(f.logText(), "write refused"), f.logText())
	require.EqualValues(t, 2, f.deadCount(t))
}
