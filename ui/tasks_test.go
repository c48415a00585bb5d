package ui_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/ui"
)

// publishedEvent writes an event of queue as the relay leaves it once published, and returns its id.
func (f *fixture) publishedEvent(t *testing.T, queue string) uuid.UUID {
	t.Helper()
	ev, err := model.NewEvent("order.placed", json.RawMessage(`{"order":42}`), model.WithQueue(queue))
	require.NoError(t, err)
	_, err = f.db.NewInsert().Model(ev).Exec(t.Context())
	require.NoError(t, err)
	_, err = f.db.NewRaw("UPDATE outbox_events SET published_at = now() WHERE event_id = ?", ev.EventID).Exec(t.Context())
	require.NoError(t, err)
	return ev.EventID
}

// TestTaskActions: the overview links every task of bunbox's in asynq's retry and archived sets to its
// event's page (a listener's task too), the event's page shows its task's state, and a signed-in
// operator runs or deletes selected tasks there or from the overview; every guard of a write holds, and
// the redirect and status line come back relative, from the fixed set.
func TestTaskActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Token: testToken, Redis: testRedis()})
	queue := outboxtest.RandomName("tasks")
	a, b, c := f.publishedEvent(t, queue), f.publishedEvent(t, queue), f.publishedEvent(t, queue)
	failTasks(t, queue, 0, "", a, b)
	failTasks(t, queue, 0, "mailer", c)
	ins := asynq.NewInspector(testRedis())
	defer ins.Close()
	state := func(id string) string {
		info, err := ins.GetTaskInfo(queue, id)
		if errors.Is(err, asynq.ErrTaskNotFound) {
			return "gone"
		}
		require.NoError(t, err)
		return info.State.String()
	}

	cl := f.client(t)
	cl.signIn()
	_, body := cl.get("/")
	require.Contains(t, body, `<a href="./event?id=`+a.String()+`" class="task-link">`+a.String()+`</a>`)
	require.Contains(t, body, `<a href="./event?id=`+c.String()+`" class="task-link">`+c.String()+`:mailer</a>`, "a listener's task links to its event")
	require.Contains(t, body, `id="task-`+b.String()+`"`, "a signed-in operator selects tasks")
	_, body = cl.get("/event?id=" + a.String())
	require.Contains(t, body, `<dd id="task-state">archived</dd>`)
	require.Contains(t, body, `id="task-run"`)
	csrf := csrfOf(t, body)

	// the guards: not signed in, no CSRF token, another site
	sel := url.Values{"task": {a.String()}, "back": {"./event?id=" + a.String()}}
	resp, _ := f.client(t).post("/tasks/run", sel, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = cl.post("/tasks/run", sel, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	sel.Set("csrf", csrf)
	resp, _ = cl.post("/tasks/delete", sel, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "cross-site")
	resp, _ = cl.post("/tasks/run", url.Values{"task": {"<b>x</b>"}, "csrf": {csrf}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = cl.post("/tasks/run", url.Values{"csrf": {csrf}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "nothing selected")
	require.Equal(t, "archived", state(a.String()), "every refused write changed nothing")

	resp, _ = cl.post("/tasks/run", sel, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "../event?id="+a.String()+"&done=tasks-run&n=1&gone=0", resp.Header.Get("Location"), "back to the event's page, relative")
	require.Equal(t, "pending", state(a.String()))
	require.Equal(t, "archived", state(b.String()), "only the selected task")
	_, body = cl.get("/event?id=" + a.String() + "&done=tasks-run&n=1&gone=0")
	require.Contains(t, body, "asynq tasks put back in line (asynq runs them next): 1.")
	require.Contains(t, body, `<dd id="task-state">pending</dd>`)

	resp, _ = cl.post("/tasks/delete", url.Values{"task": {b.String(), c.String() + ":mailer"}, "csrf": {csrf}, "back": {"./"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "../?done=tasks-deleted&n=2&gone=0", resp.Header.Get("Location"))
	require.Equal(t, "gone", state(b.String()))
	require.Equal(t, "gone", state(c.String()+":mailer"))
	_, body = cl.get("/?done=tasks-deleted&n=2&gone=3")
	require.Contains(t, body, "asynq tasks deleted: 2. Not acted on, having left the retry or archived state already: 3.")
	require.Contains(t, f.logText(), "ui: asynq tasks deleted")
	require.Contains(t, f.logText(), b.String())

	resp, _ = cl.post("/tasks/delete", url.Values{"task": {a.String()}, "csrf": {csrf}}, nil)
	require.Equal(t, "../?done=tasks-deleted&n=0&gone=0", resp.Header.Get("Location"), "a pending task is not touched")
	require.Equal(t, "pending", state(a.String()))
}

// TestTaskActionsReadOnly: without a token the page offers no task action and refuses one.
func TestTaskActionsReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Redis: testRedis()})
	c := f.client(t)
	resp, _ := c.post("/tasks/run", url.Values{"task": {uuid.NewString()}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	_, body := c.get("/")
	require.NotContains(t, body, `id="task-run"`)
}
