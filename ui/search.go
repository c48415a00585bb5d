package ui

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
)

// searchNotes are what a search says, by code: the page never shows the text it was asked for, only one
// of these and the id as it parsed.
var searchNotes = map[string]string{
	"empty":     "Give an event id (a UUID), or an asynq task id (an event id, or an event id and :listener).",
	"malformed": "That is not an event id: an event id is a UUID, and a task id of a listener is an event id and :listener.",
	"none":      "No event with this id in the outbox, and no task with this id in any queue asynq knows.",
	"noredis":   "No event with this id in the outbox. asynq was not searched: the page was not given Redis.",
	"asynqerr":  "No event with this id in the outbox, and asynq could not be searched; the server's log says why.",
	"asynq": "No event with this id in the outbox (deleted by the relay's retention, purged, or never written " +
		"through it), but asynq holds a task with this id:",
}

// maxListener bounds the listener part of a task id a search accepts.
const maxListener = 100

// searchResult is what the search page shows.
type searchResult struct {
	Note  string
	ID    string // the task id searched for, as parsed; "" for a malformed one
	Tasks []*asynq.TaskInfo
}

// parseTaskID reads an event id or a task id of bunbox's ("<event id>" or "<event id>:<listener>"):
// the event id, and the task id in its canonical form.
func parseTaskID(s string) (uuid.UUID, string, bool) {
	idPart, listener, fanout := strings.Cut(s, ":")
	id, err := uuid.Parse(idPart)
	if err != nil || len(idPart) != 36 || id == uuid.Nil {
		return uuid.Nil, "", false
	}
	if !fanout {
		return id, id.String(), true
	}
	if listener == "" || len(listener) > maxListener || strings.IndexFunc(listener, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r)
	}) >= 0 {
		return uuid.Nil, "", false
	}
	return id, id.String() + ":" + listener, true
}

// serveSearch finds an event by id: in the outbox it opens the event's page; otherwise it looks for a
// task of that id in every queue asynq knows.
func (h *Handler) serveSearch(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	res := searchResult{}
	status := http.StatusOK
	show := func(code string) {
		res.Note = searchNotes[code]
		h.renderStatus(w, status, "search.html", h.page(r, "Search", res))
	}
	if q == "" {
		show("empty")
		return
	}
	id, taskID, ok := parseTaskID(q)
	if !ok {
		status = http.StatusBadRequest
		show("malformed")
		return
	}
	res.ID = taskID
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	n, err := h.db.NewSelect().TableExpr(h.names.Outbox()).Where("event_id = ?", id).Count(ctx)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	if n > 0 {
		seeOther(w, "./event?id="+id.String())
		return
	}
	status = http.StatusNotFound
	if h.inspector == nil {
		show("noredis")
		return
	}
	if res.Tasks, err = h.findTasks(taskID); err != nil {
		h.log.LogAttrs(r.Context(), slog.LevelWarn, "bunbox ui: search asynq", slog.Any("error", err))
		show("asynqerr")
		return
	}
	if len(res.Tasks) == 0 {
		show("none")
		return
	}
	status = http.StatusOK
	show("asynq")
}

// findTasks looks the task id up in every queue asynq knows.
func (h *Handler) findTasks(taskID string) ([]*asynq.TaskInfo, error) {
	queues, err := h.inspector.Queues()
	if err != nil {
		return nil, err
	}
	var found []*asynq.TaskInfo
	for _, q := range queues {
		t, err := h.inspector.GetTaskInfo(q, taskID)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		case err != nil:
			return nil, err
		default:
			found = append(found, t)
		}
	}
	return found, nil
}
