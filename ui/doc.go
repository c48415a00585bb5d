// Package ui is bunbox's operator page: one server-rendered view of an event from commit to handler. It
// shows the outbox's backlog and lag per queue and event name, the pending, scheduled and dead events with
// their last error and payload, the ordering keys a dead event blocks, and — when it is given Redis — what
// asynq holds per queue (pending, active, scheduled, retry, archived, with the handler's last error).
//
// The page is read-only unless the Handler is given a token. With one, an operator signs in with it and
// may retry or purge dead events by selection; every write is a POST that must come from the page itself
// (a same-origin check and a per-session CSRF token) and is logged. The HTML embeds nothing from outside:
// no script at all, one stylesheet served by the Handler, and a Content-Security-Policy that allows only
// that. No connection string, password or token is ever rendered.
//
//	h, err := ui.New(db, ui.Config{Redis: redisOpt, Token: os.Getenv("BUNBOX_UI_TOKEN")})
//	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))
//
// `bunbox ui` serves the same Handler on its own.
package ui
