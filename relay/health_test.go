package relay

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

// get asks h for path and returns the status and body.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, string(body)
}

// An embedded relay's probes: ready on its own Redis connections, not ready (503, naming the table and
// what to run) once the outbox table is gone; alive throughout.
func TestHealthHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := New(b.db, b.redis, Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	h := r.HealthHandler()

	code, body := get(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	code, body = get(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code, body)
	var rep Readiness
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.Equal(t, Readiness{Ready: true, Postgres: "ok", Schema: "ok", Redis: "ok", Rounds: "ok", RedisEviction: "ok"}, rep)

	_, err = b.db.ExecContext(context.Background(), "ALTER TABLE outbox_events RENAME TO outbox_events_gone")
	require.NoError(t, err)
	code, body = get(t, h, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.False(t, rep.Ready)
	require.Equal(t, "ok", rep.Postgres)
	require.Equal(t, "ok", rep.Redis)
	require.Contains(t, rep.Schema, "outbox_events")
	require.Contains(t, rep.Schema, "bunbox migrate up")
	code, _ = get(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code)

	_, err = b.db.ExecContext(context.Background(), "ALTER TABLE outbox_events_gone RENAME TO outbox_events")
	require.NoError(t, err)
	_, err = b.db.ExecContext(context.Background(), "ALTER TABLE outbox_events RENAME COLUMN queue TO queue_gone")
	require.NoError(t, err)
	rep = r.Ready(context.Background())
	require.False(t, rep.Ready)
	require.Contains(t, rep.Schema, "queue")
	require.Contains(t, rep.Schema, "bunbox migrate up")
}

// noPingEnqueuer is an Enqueuer without a Ping method.
type noPingEnqueuer struct{ Enqueuer }

// With Config.Enqueuer, Redis is pinged through its Ping method, or not checked when it has none.
func TestReadyWithEnqueuer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newRelay(t, Config{})
	require.Equal(t, Readiness{Ready: true, Postgres: "ok", Schema: "ok", Redis: "ok", Rounds: "ok", RedisEviction: evictionNotChecked}, r.Ready(context.Background()))

	r = b.newRelay(t, Config{Enqueuer: noPingEnqueuer{b.enq}})
	require.Equal(t, Readiness{Ready: true, Postgres: "ok", Schema: "ok", Redis: redisNotChecked, Rounds: "ok", RedisEviction: evictionNotChecked}, r.Ready(context.Background()))

	down := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = down.Close() })
	r = b.newRelay(t, Config{Enqueuer: noPingEnqueuer{b.enq}})
	r.pinger = down // as New sets it for an Enqueuer with Ping, whose Redis is down
	rep := r.Ready(context.Background())
	require.False(t, rep.Ready)
	require.NotEqual(t, "ok", rep.Redis)
}
