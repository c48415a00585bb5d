package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sessionCookie names the cookie that carries a signed-in operator's session id.
const sessionCookie = "bunbox_ui_session"

// sessionTTL is how long a sign-in lasts.
const sessionTTL = 12 * time.Hour

// sessions holds the signed-in operators of one Handler: a random id per sign-in, never the token itself,
// and the key the CSRF tokens are derived with.
type sessions struct {
	token []byte
	key   [32]byte // HMAC key of the CSRF tokens, random per Handler

	mu  sync.Mutex
	ids map[string]time.Time // session id → expiry
	now func() time.Time
}

func newSessions(token string) *sessions {
	s := &sessions{token: []byte(token), ids: map[string]time.Time{}, now: time.Now}
	_, _ = rand.Read(s.key[:])
	return s
}

// writable reports whether writes can be enabled at all: only with a token.
func (s *sessions) writable() bool { return len(s.token) > 0 }

// signIn returns a new session id; the caller checked the token.
func (s *sessions) signIn() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, exp := range s.ids { // forget expired sessions as new ones come
		if now.After(exp) {
			delete(s.ids, k)
		}
	}
	s.ids[id] = now.Add(sessionTTL)
	return id
}

// session returns the session id of r when it is signed in, or "".
func (s *sessions) session(r *http.Request) string {
	if !s.writable() {
		return ""
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.ids[c.Value]
	if !ok || s.now().After(exp) {
		return ""
	}
	return c.Value
}

func (s *sessions) signOut(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
}

// csrf is the CSRF token of a session: the forms of the page carry it, and a write must give it back.
func (s *sessions) csrf(session string) string {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte(session))
	return hex.EncodeToString(m.Sum(nil))
}

func (s *sessions) validCSRF(session, given string) bool {
	return session != "" && hmac.Equal([]byte(s.csrf(session)), []byte(given))
}

// valid reports whether given is the token, in constant time.
func (s *sessions) valid(given string) bool {
	return s.writable() && subtle.ConstantTimeCompare([]byte(given), s.token) == 1
}

// basicChallenge asks a client that is not a browser for the token by HTTP basic auth.
const basicChallenge = `Basic realm="bunbox ui", charset="UTF-8"`

// access is who a request comes from, as the Handler checked it once in ServeHTTP.
type access struct {
	session string // the signed-in session, or ""
	reader  bool   // signed in, or the token by HTTP basic auth: sees everything in full
}

type accessKey struct{}

func accessOf(r *http.Request) access {
	a, _ := r.Context().Value(accessKey{}).(access)
	return a
}

// openRoute reports whether r may be served before any check of the token: the sign-in itself and the
// stylesheet, which the sign-in page needs.
func openRoute(r *http.Request) bool {
	return (r.Method == http.MethodPost && r.URL.Path == "/login") ||
		((r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(r.URL.Path, "/assets/"))
}

// authenticate finds who r comes from: a session cookie, or the token by HTTP basic auth (any user
// name). A wrong basic-auth token is charged to the sign-in throttle like a wrong sign-in. It answers
// the request itself and returns false when r may go no further.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (access, bool) {
	var a access
	if a.session = h.sessions.session(r); a.session != "" {
		a.reader = true
		return a, true
	}
	_, given, basic := r.BasicAuth()
	if basic && h.sessions.writable() {
		if !h.checkToken(w, r, given, true) {
			return a, false
		}
		a.reader = true
	}
	if !a.reader && h.sessions.writable() && !h.cfg.OpenReads && !openRoute(r) {
		h.askToken(w, r)
		return a, false
	}
	return a, true
}

// checkToken compares a token given by a sign-in or by basic auth (challenge: answer a wrong one with a
// basic-auth challenge), under the throttle: a throttled client gets 429 (with Retry-After) without its
// token being compared; a wrong token is charged, logged (rate-limited) and answered with 401. It
// reports whether the token was right; when not, the request has been answered.
func (h *Handler) checkToken(w http.ResponseWriter, r *http.Request, given string, challenge bool) bool {
	client := h.client(r)
	if ok, wait := h.throttle.allow(client); !ok {
		h.throttle.log.refused("throttled", slog.String("remote", r.RemoteAddr))
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)+1))
		http.Error(w, "ui: too many wrong tokens: try again later", http.StatusTooManyRequests)
		return false
	}
	if !h.sessions.valid(given) {
		h.throttle.failed(client)
		h.throttle.log.refused("wrong token", slog.String("remote", r.RemoteAddr))
		if challenge {
			w.Header().Set("WWW-Authenticate", basicChallenge)
		}
		http.Error(w, "ui: wrong token", http.StatusUnauthorized)
		return false
	}
	return true
}

// askToken answers a reader without the token with 401: a GET gets the sign-in page, and unless it is a
// browser's navigation (Sec-Fetch-Mode: navigate, which gets the form, not the browser's basic-auth
// dialog) a basic-auth challenge too.
func (h *Handler) askToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "ui: sign in with the token first", http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Sec-Fetch-Mode") != "navigate" {
		w.Header().Set("WWW-Authenticate", basicChallenge)
	}
	p := h.page(r, "Sign in", nil)
	p.Search = "" // the search box shows nothing until the reader has the token
	h.renderStatus(w, http.StatusUnauthorized, "signin.html", p)
}

// client is who the sign-in throttle charges a refused token to: the connection's remote address, or
// with Config.TrustProxy the last address of X-Forwarded-For (the one the proxy saw).
func (h *Handler) client(r *http.Request) string {
	if h.cfg.TrustProxy {
		if v := r.Header.Values("X-Forwarded-For"); len(v) > 0 {
			last := v[len(v)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if last = strings.TrimSpace(last); last != "" {
				return last
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// secure reports whether the session cookie should be Secure: on TLS, or with Config.TrustProxy behind a
// proxy that says the client used https.
func (h *Handler) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !h.cfg.TrustProxy {
		return false
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}
