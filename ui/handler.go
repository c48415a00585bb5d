package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/internal/tables"
)

//go:embed assets
var assets embed.FS

// contentSecurityPolicy allows the page nothing but its own stylesheet and its own forms: no script, no
// frame, no outside origin.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// Handler serves the operator page. Build it with New; it is safe for concurrent use.
type Handler struct {
	db        *bun.DB
	cfg       Config
	log       *slog.Logger
	inspector *asynq.Inspector // nil without Config.Redis
	sessions  *sessions
	throttle  *throttle
	refusals  *limitedLog // refused writes
	origin    *http.CrossOriginProtection
	pages     *template.Template
	mux       *http.ServeMux
	names     tables.Names  // Config.Location's Schema and TablePrefix
	admin     *admin.Outbox // the operator's queries on the outbox of Config.Location
}

// New returns the Handler of the page on db. Invalid settings give an error wrapping ErrInvalidConfig
// that names the field. Close releases the Redis connections of Config.Redis.
func New(db *bun.DB, cfg Config) (*Handler, error) {
	if db == nil {
		return nil, errors.New("ui: New: db is nil")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("ui: templates: %w", err)
	}
	h := &Handler{db: db, cfg: cfg, log: cfg.Logger, sessions: newSessions(cfg.Token),
		throttle: newThrottle(cfg.Logger), refusals: newLimitedLog(cfg.Logger, "bunbox ui: write refused"),
		origin: http.NewCrossOriginProtection(), pages: pages, mux: http.NewServeMux()}
	h.names, _ = tables.New(cfg.Location.Schema, cfg.Location.TablePrefix) // validated above
	if h.admin, err = admin.New(db, cfg.Location); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.Redis != nil {
		if h.inspector, err = newInspector(cfg.Redis); err != nil {
			return nil, err
		}
	}
	static, _ := fs.Sub(assets, "assets")
	h.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /{$}", h.serveOverview)
	h.mux.HandleFunc("GET /events", h.serveEvents)
	h.mux.HandleFunc("GET /event", h.serveEvent)
	h.mux.HandleFunc("GET /search", h.serveSearch)
	h.mux.HandleFunc("GET /history", h.serveHistory)
	h.mux.HandleFunc("POST /login", h.serveLogin)
	h.mux.HandleFunc("POST /logout", h.write(h.serveLogout))
	h.mux.HandleFunc("POST /dead/retry", h.write(h.serveDeadAction))
	h.mux.HandleFunc("POST /dead/purge", h.write(h.serveDeadAction))
	h.mux.HandleFunc("POST /tasks/run", h.write(h.serveTaskAction))
	h.mux.HandleFunc("POST /tasks/delete", h.write(h.serveTaskAction))
	return h, nil
}

// newInspector makes an asynq.Inspector, which panics on unusable Redis options, and returns the panic
// as an error instead.
func newInspector(opt asynq.RedisConnOpt) (in *asynq.Inspector, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("ui: unusable Redis options %T: %v", opt, p)
		}
	}()
	return asynq.NewInspector(opt), nil
}

// Close releases the Redis connections the Handler made.
func (h *Handler) Close() error {
	h.throttle.log.close()
	h.refusals.close()
	if h.inspector == nil {
		return nil
	}
	return h.inspector.Close()
}

// maxFormBytes bounds the body of a write: a form of event ids.
const maxFormBytes = 1 << 20

// ServeHTTP serves the page, its stylesheet and its write actions. With a Token and not
// Config.OpenReads, every route but POST /login and the stylesheet needs the token first.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", contentSecurityPolicy)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin")
	hdr.Set("Cache-Control", "no-store")
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	}
	a, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	h.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accessKey{}, a)))
}

// page is what every template gets.
type page struct {
	Title    string
	Writable bool   // the Handler has a token
	SignedIn bool   // this request's operator signed in with it
	Reader   bool   // signed in or the token by basic auth: payloads, errors and metadata in full
	CSRF     string // the session's CSRF token, for the forms
	Flash    string
	Back     string // this page, relative, for the sign-in form to return to
	Redis    bool
	Search   string // the id searched for, as parsed (never the text given)
	Data     any
}

func (h *Handler) page(r *http.Request, title string, data any) page {
	a := accessOf(r)
	p := page{Title: title, Writable: h.sessions.writable(), SignedIn: a.session != "", Reader: a.reader,
		Redis: h.inspector != nil, Data: data, Flash: flash(r.URL.Query()), Back: backTo(r)}
	if a.session != "" {
		p.CSRF = h.sessions.csrf(a.session)
	}
	if _, id, ok := parseTaskID(strings.TrimSpace(r.URL.Query().Get("q"))); ok {
		p.Search = id
	}
	return p
}

// flashes are the status lines a redirect may ask the page to show, by code (?done=): the page never
// shows text from the query, only one of these with the count (?n=) as a number.
var flashes = map[string]string{
	"retried":       "Dead events retried: %d.",
	"purged":        "Dead events purged: %d.",
	"tasks-run":     "asynq tasks put back in line (asynq runs them next): %d.",
	"tasks-deleted": "asynq tasks deleted: %d.",
}

// flashGone is added to a task action's status line (?gone=) when some selected tasks had left their
// state before the action.
const flashGone = " Not acted on, having left the retry or archived state already: %d."

// flash is the status line that q asks for, or "" for an unknown code or a count that is not one.
func flash(q url.Values) string {
	format, ok := flashes[q.Get("done")]
	n, err := strconv.ParseUint(q.Get("n"), 10, 31)
	if !ok || err != nil {
		return ""
	}
	line := fmt.Sprintf(format, n)
	if gone, err := strconv.ParseUint(q.Get("gone"), 10, 31); err == nil && gone > 0 && strings.HasPrefix(q.Get("done"), "tasks-") {
		line += fmt.Sprintf(flashGone, gone)
	}
	return line
}

// backTo is this page as a path relative to the page's mount, for the sign-in form to return to: the
// path, and the state and event id it was asked for when they are ones.
func backTo(r *http.Request) string {
	to := "./" + strings.TrimPrefix(r.URL.Path, "/")
	q := url.Values{}
	if v := r.URL.Query().Get("state"); v == "pending" || v == "scheduled" || v == "dead" {
		q.Set("state", v)
	}
	if id, err := uuid.Parse(r.URL.Query().Get("id")); err == nil {
		q.Set("id", id.String())
	}
	if _, id, ok := parseTaskID(strings.TrimSpace(r.URL.Query().Get("q"))); ok {
		q.Set("q", id)
	}
	if hours, err := parseHours(r.URL.Query().Get("hours")); err == nil && r.URL.Query().Has("hours") {
		q.Set("hours", strconv.Itoa(hours))
	}
	if len(q) > 0 {
		to += "?" + q.Encode()
	}
	return to
}

func (h *Handler) render(w http.ResponseWriter, name string, p page) {
	h.renderStatus(w, http.StatusOK, name, p)
}

func (h *Handler) renderStatus(w http.ResponseWriter, status int, name string, p page) {
	var b strings.Builder
	if err := h.pages.ExecuteTemplate(&b, name, p); err != nil {
		h.log.Error("bunbox ui: render", slog.String("page", name), slog.Any("error", err))
		http.Error(w, "ui: the page could not be rendered; see the server's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail answers a request whose reading failed; the error goes to the log and, when it is the request's
// fault or the reader has the token, to the page: a database error can name the user, the database and
// its host, which a reader without the token does not see.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	h.log.LogAttrs(r.Context(), slog.LevelWarn, "bunbox ui: request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	if status >= http.StatusInternalServerError && !accessOf(r).reader {
		http.Error(w, "ui: the outbox could not be read; the server's log says why", status)
		return
	}
	http.Error(w, "ui: "+err.Error(), status)
}

func (h *Handler) serveOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	o, err := h.readOverview(ctx)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	h.render(w, "overview.html", h.page(r, "Outbox", o))
}

func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	state := r.URL.Query().Get("state")
	l, err := h.readEvents(r.Context(), state)
	switch {
	case errors.Is(err, errUnknownState):
		h.fail(w, r, http.StatusBadRequest, err)
		return
	case err != nil:
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	h.render(w, "events.html", h.page(r, strings.ToUpper(state[:1])+state[1:]+" events", l))
}

func (h *Handler) serveEvent(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.URL.Query().Get("id"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("id must be an event id (a UUID): %w", err))
		return
	}
	d, err := h.readEvent(r.Context(), id)
	if err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, errNoRows) {
			status, err = http.StatusNotFound, fmt.Errorf("no event %s in the outbox", id)
		}
		h.fail(w, r, status, err)
		return
	}
	h.render(w, "event.html", h.page(r, "Event "+id.String(), d))
}

// write guards a write action: the Handler must have a token, the operator must be signed in, the
// request must come from the page's own origin (Sec-Fetch-Site / Origin, http.CrossOriginProtection) and
// carry the session's CSRF token. A refused write changes nothing and is logged (at most a line a
// minute, with the count).
func (h *Handler) write(next func(w http.ResponseWriter, r *http.Request, session string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		refuse := func(status int, why string) {
			h.refusals.refused(why, slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
			http.Error(w, "ui: "+why, status)
		}
		if !h.sessions.writable() {
			refuse(http.StatusForbidden, "the page is read-only: start it with a token to retry or purge events")
			return
		}
		if err := h.origin.Check(r); err != nil {
			refuse(http.StatusForbidden, "cross-origin request refused")
			return
		}
		s := accessOf(r).session
		if s == "" {
			refuse(http.StatusUnauthorized, "sign in with the token first")
			return
		}
		if err := r.ParseForm(); err != nil {
			refuse(http.StatusBadRequest, "the form could not be read")
			return
		}
		if !h.sessions.validCSRF(s, r.PostFormValue("csrf")) {
			refuse(http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again")
			return
		}
		next(w, r, s)
	}
}

func (h *Handler) serveLogin(w http.ResponseWriter, r *http.Request) {
	if !h.sessions.writable() {
		http.Error(w, "ui: the page is read-only: there is nothing to sign in to", http.StatusForbidden)
		return
	}
	if err := h.origin.Check(r); err != nil {
		http.Error(w, "ui: cross-origin request refused", http.StatusForbidden)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "ui: the form could not be read", http.StatusBadRequest)
		return
	}
	if !h.checkToken(w, r, r.PostFormValue("token"), false) {
		return
	}
	id := h.sessions.signIn()
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "bunbox ui: operator signed in", slog.String("remote", r.RemoteAddr))
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: h.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second)})
	seeOther(w, back(r, "./"))
}

// seeOther redirects to to, a path relative to this request's (./events, ../events): the browser
// resolves it against the URL it asked for, so the redirect stays under the prefix the page is mounted
// at (http.StripPrefix, a proxy's path), which http.Redirect would resolve against the stripped path.
func seeOther(w http.ResponseWriter, to string) {
	w.Header().Set("Location", to)
	w.WriteHeader(http.StatusSeeOther)
}

func (h *Handler) serveLogout(w http.ResponseWriter, r *http.Request, session string) {
	h.sessions.signOut(session)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: h.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	seeOther(w, "./")
}

// serveDeadAction retries or purges the dead events selected on the page, by event id only: a form can
// never select "all".
func (h *Handler) serveDeadAction(w http.ResponseWriter, r *http.Request, _ string) {
	var ids []uuid.UUID
	for _, s := range r.PostForm["id"] {
		id, err := uuid.Parse(s)
		if err != nil {
			http.Error(w, fmt.Sprintf("ui: %q is not an event id", s), http.StatusBadRequest)
			return
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		http.Error(w, "ui: select at least one dead event", http.StatusBadRequest)
		return
	}
	f := admin.DeadFilter{EventIDs: ids}
	action, run := "retried", h.admin.RetryDeadWhere
	if strings.HasSuffix(r.URL.Path, "/purge") {
		action, run = "purged", h.admin.PurgeDead
	}
	n, err := run(r.Context(), f)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "bunbox ui: dead events "+action, slog.Int64("count", n),
		slog.Int("selected", len(ids)), slog.Any("event_ids", ids), slog.String("remote", r.RemoteAddr))
	seeOther(w, fmt.Sprintf("../events?state=dead&done=%s&n=%d", action, n))
}

// back is where a form returns to: the page it was sent from, when that is a path of this page relative
// to it (never another host or outside the mount: no "//", "..", backslash or scheme).
func back(r *http.Request, fallback string) string {
	to := r.PostFormValue("back")
	if !strings.HasPrefix(to, "./") || strings.ContainsAny(to, "\\:") || strings.Contains(to, "//") || strings.Contains(to, "..") {
		return fallback
	}
	return to
}
