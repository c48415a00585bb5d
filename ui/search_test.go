package ui_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/ui"
)

// TestSearch: an id in the outbox opens its event's page (a relative redirect); an id only asynq holds
// shows its task's state, queue and last error; an unknown id, a malformed one and none each get their
// fixed note, with nothing of what was typed shown back.
func TestSearch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{Redis: testRedis()})
	c := f.client(t)
	search := func(q string) (*http.Response, string) {
		t.Helper()
		return c.get("/search?q=" + url.QueryEscape(q))
	}

	resp, body := search(" " + f.dead[0].String() + " ")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(t, "./event?id="+f.dead[0].String(), resp.Header.Get("Location"))

	queue := outboxtest.RandomName("search")
	archived, fanned := uuid.New(), uuid.New()
	failTasks(t, queue, 0, "", archived)
	failTasks(t, queue, 0, "mailer", fanned)
	resp, body = search(archived.String())
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "asynq holds a task with this id")
	require.Contains(t, body, `<td class="state">archived</td>`)
	require.Contains(t, body, "<td>"+queue+"</td>")
	require.Contains(t, body, "handler failed: card declined")
	resp, body = search(fanned.String() + ":mailer")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "<td>"+fanned.String()+":mailer</td>")

	resp, body = search(uuid.NewString())
	require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	require.Contains(t, body, "No event with this id in the outbox, and no task with this id in any queue asynq knows.")

	for _, bad := range []string{"<script>alert(1)</script>", "not-an-id", f.dead[0].String() + ":", f.dead[0].String() + ":a b",
		"{" + f.dead[0].String() + "}", uuid.Nil.String()} {
		resp, body = search(bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		require.Contains(t, body, "That is not an event id", bad)
		require.NotContains(t, body, "<script>alert", bad)
		require.NotContains(t, body, "a b", bad)
	}
	resp, body = search("")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Give an event id")
	require.Contains(t, body, `action="./search"`, "every page has the search box")
}

// TestSearchWithoutRedis: without Redis an id not in the outbox says asynq was not searched.
func TestSearchWithoutRedis(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ui.Config{})
	resp, body := f.client(t).get("/search?q=" + uuid.NewString())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, body, "asynq was not searched")
}
