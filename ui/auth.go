package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
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

// signIn checks the token given and returns a new session id, or "" when it is wrong.
func (s *sessions) signIn(given string) string {
	if !s.writable() || subtle.ConstantTimeCompare([]byte(given), s.token) != 1 {
		return ""
	}
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
