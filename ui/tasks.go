package ui

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/bunbox/bunbox/internal/asynqtasks"
)

// serveTaskAction runs or deletes the archived and retry tasks selected on the page, by task id only (a
// form can never select "all"), through internal/asynqtasks as `bunbox tasks` does: only tasks of
// bunbox's events in those states are touched.
func (h *Handler) serveTaskAction(w http.ResponseWriter, r *http.Request, _ string) {
	if h.inspector == nil {
		http.Error(w, "ui: the page was not given Redis: there are no asynq tasks to act on", http.StatusBadRequest)
		return
	}
	var f asynqtasks.Filter
	for _, s := range r.PostForm["task"] {
		id, taskID, ok := parseTaskID(s)
		if !ok {
			http.Error(w, "ui: a selected task is not a task id of bunbox's (an event id, or an event id and :listener)", http.StatusBadRequest)
			return
		}
		if !slices.Contains(f.EventIDs, id) {
			f.EventIDs = append(f.EventIDs, id)
		}
		f.TaskIDs = append(f.TaskIDs, taskID)
	}
	if len(f.TaskIDs) == 0 {
		http.Error(w, "ui: select at least one task", http.StatusBadRequest)
		return
	}
	action, verb, act := "tasks-run", "run", asynqtasks.Run
	if strings.HasSuffix(r.URL.Path, "/delete") {
		action, verb, act = "tasks-deleted", "deleted", asynqtasks.Delete
	}
	o, err := act(r.Context(), h.inspector, f)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "bunbox ui: asynq tasks "+verb, slog.Int("count", o.Done),
		slog.Int("gone", o.Gone), slog.Int("selected", len(f.TaskIDs)), slog.Any("task_ids", f.TaskIDs),
		slog.String("remote", r.RemoteAddr))
	to := "../" + strings.TrimPrefix(back(r, "./"), "./") // the form's page, from /tasks/…
	sep := "?"
	if strings.Contains(to, "?") {
		sep = "&"
	}
	seeOther(w, fmt.Sprintf("%s%sdone=%s&n=%d&gone=%d", to, sep, action, o.Done, o.Gone))
}
