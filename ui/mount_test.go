package ui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/ui"
)

// TestRedirectsStayUnderTheMount: mounted on a service's mux under /outbox (http.StripPrefix), the
// sign-in, the retry, the purge and the sign-out redirect to pages under /outbox, and the pages they
// lead to are served; a "back" that would leave the mount falls back to the overview.
func TestRedirectsStayUnderTheMount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Token: testToken})
	c := f.mounted(t, "/outbox")

	resp, _ := c.get("/outbox/")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = c.post("/outbox/login", url.Values{"token": {testToken}, "back": {"./events?state=dead"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	to := follow(t, c, resp)
	require.Equal(t, "/outbox/events?state=dead", to.RequestURI())
	_, body := c.get(to.RequestURI())
	require.Contains(t, body, f.dead[0].String(), "the sign-in led to the dead list, signed in")
	csrf := csrfOf(t, body)

	resp, _ = c.post("/outbox/dead/retry", url.Values{"id": {f.dead[0].String()}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	to = follow(t, c, resp)
	require.Equal(t, "/outbox/events?state=dead&done=retried&n=1", to.RequestURI())
	resp, body = c.get(to.RequestURI())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `<p class="flash" id="flash">Dead events retried: 1.</p>`)

	resp, _ = c.post("/outbox/dead/purge", url.Values{"id": {f.dead[1].String()}, "csrf": {csrf}}, nil)
	require.Equal(t, "/outbox/events?state=dead&done=purged&n=1", follow(t, c, resp).RequestURI())

	for _, away := range []string{"./../admin", "../admin", "//evil.example/x", "./\\evil", "https://evil.example/"} {
		resp, body = c.post("/outbox/login", url.Values{"token": {testToken}, "back": {away}}, nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, away+": "+body)
		require.Equal(t, "/outbox/", follow(t, c, resp).RequestURI(), away)
	}

	_, body = c.get("/outbox/events?state=dead")
	resp, _ = c.post("/outbox/logout", url.Values{"csrf": {csrfOf(t, body)}}, nil) // the last sign-in's session
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/outbox/", follow(t, c, resp).RequestURI())
}

// follow resolves a redirect's Location against the URL the client asked for, as a browser does.
func follow(t *testing.T, c *client, resp *http.Response) *url.URL {
	t.Helper()
	to, err := resp.Location()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(to.String(), c.base), "the redirect stays on the server: %s", to)
	return to
}

// TestStatusLineFromAFixedSet: the page's status line is one of its own, chosen by a short code
// (?done=) with a count (?n=); text in the query is never shown, so a crafted link cannot make the page
// say anything else.
func TestStatusLineFromAFixedSet(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	c := f.client(t)
	const lure = "All dead events were purged. Re-enter the token at https://evil.example"

	for _, query := range []string{
		"done=" + url.QueryEscape(lure),
		"done=retried&n=" + url.QueryEscape(lure),
		"done=" + url.QueryEscape("3 retried"),
		"done=retried",
		"done=retried&n=-1",
		"done=retried&n=99999999999",
		"done=deleted&n=3",
	} {
		resp, body := c.get("/events?state=dead&" + query)
		require.Equal(t, http.StatusOK, resp.StatusCode, query)
		require.NotContains(t, body, `id="flash"`, query)
		require.NotContains(t, body, "evil.example", query)
	}
	_, body := c.get("/events?state=dead&done=retried&n=3")
	require.Contains(t, body, `<p class="flash" id="flash">Dead events retried: 3.</p>`)
	_, body = c.get("/events?state=dead&done=purged&n=0")
	require.Contains(t, body, `<p class="flash" id="flash">Dead events purged: 0.</p>`)
	_, body = c.get("/events?state=dead&done=tasks-run&n=2&gone=" + url.QueryEscape(lure))
	require.Contains(t, body, `<p class="flash" id="flash">asynq tasks put back in line (asynq runs them next): 2.</p>`)
	_, body = c.get("/events?state=dead&done=purged&n=2&gone=4")
	require.Contains(t, body, `<p class="flash" id="flash">Dead events purged: 2.</p>`, "gone counts only for tasks")
}
