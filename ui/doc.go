// Package ui is bunbox's operator page: one server-rendered view of an event from commit to handler. It
// shows the outbox's backlog and lag per queue and event name, the stream's lane, the pending, scheduled
// and dead events with their last error and payload, the ordering keys a dead event blocks, a history of
// published and dead events and lag per minute, a search by event id, and — when it is given Redis — what
// asynq holds per queue (pending, active, scheduled, retry, archived, with the handler's last error), each
// task linking to its event's page.
//
// Access: without a token the page is read-only and open to whoever reaches it, and it shows payloads,
// errors and metadata only truncated. With Config.Token, the token guards reads too: every route but the
// sign-in and the stylesheet answers 401 until the reader signs in (a session cookie) or sends the token
// by HTTP basic auth (any user name); such a reader sees an event's payload, errors and metadata in full
// (lists show them truncated), and a signed-in operator may retry or purge dead events and run or delete
// asynq's retry and archived tasks, by selection. Config.OpenReads opens the reads again (truncated,
// database errors hidden) while writes keep needing a sign-in. Wrong tokens are throttled per client and per Handler. Every write is a POST that must come
// from the page itself (a same-origin check and a per-session CSRF token) and is logged. The page's links
// and redirects are relative, so it works mounted under any prefix. The HTML embeds nothing from
// outside: no script at all, one stylesheet served by the Handler, and a Content-Security-Policy that
// allows only that. No connection string, password or token is ever rendered.
//
//	h, err := ui.New(db, ui.Config{Redis: redisOpt, Token: os.Getenv("BUNBOX_UI_TOKEN")})
//	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))
//
// `bunbox ui` serves the same Handler on its own.
package ui
