package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

func TestOpsUsage(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"DeadSideways", []string{"dead", "sideways"}, `unknown dead command "sideways" (want list, retry or purge)`},
		{"DeadRetryIDsAndAll", []string{"dead", "retry", "-all", uuid.NewString()}, "event ids, -name or -all, one of them"},
		{"DeadRetryNameAndIDs", []string{"dead", "retry", "-name", "a", uuid.NewString()}, "event ids, -name or -all, one of them"},
		{"DeadPurgeNothing", []string{"dead", "purge", "-yes"}, "dead purge needs -older-than DURATION, -name NAME or -all"},
		{"DeadPurgeAllAndName", []string{"dead", "purge", "-all", "-name", "a"}, "-all alone"},
		{"DeadPurgeNegative", []string{"dead", "purge", "-older-than", "-1h"}, "-older-than must be positive"},
		{"DeadPurgeExtra", []string{"dead", "purge", "-all", "now"}, "takes no arguments"},
		{"ReconcileWindow", []string{"reconcile", "-window", "0s"}, "-window must be positive"},
		{"ReconcileExtra", []string{"reconcile", "now"}, "takes no arguments"},
		{"RelayReconcileWindow", []string{"relay", "-reconcile-window", "-1m"}, "-reconcile-window must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			require.Equal(t, 2, code, "stdout: %s\nstderr: %s", stdout, stderr)
			require.Contains(t, stderr, tt.wantStderr)
		})
	}
}

// schemaEnv makes a fresh schema, migrated, and the CLI environment that works in it.
func schemaEnv(t *testing.T) (map[string]string, *bun.DB) {
	t.Helper()
	schema := outboxtest.NewSchema(t)
	env := map[string]string{
		"DATABASE_URL": outboxtest.SchemaURL(t, schema),
		"REDIS_ADDR":   outboxtest.RedisAddr(),
	}
	code, _, stderr := runCLI(t, env, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	return env, outboxtest.Open(t, map[string]any{"search_path": schema})
}

// insertEvent commits an event; set runs on its row afterwards (e.g. "dead_at = now()"), when not empty.
// A row that set changes is made a row of the per-row path (unless set writes published_at): dead rows,
// retried ones and rows cancelled before a relay saw them are rows the stream handed over.
func insertEvent(t *testing.T, db bun.IDB, name, queue, set string) *model.Event {
	t.Helper()
	ctx := context.Background()
	ev, err := model.NewEvent(name, map[string]string{"k": "v"}, model.WithQueue(queue))
	require.NoError(t, err)
	_, err = db.NewInsert().Model(ev).Exec(ctx)
	require.NoError(t, err)
	if set != "" {
		if !strings.Contains(set, "published_at") {
			set = "published_at = NULL, " + set
		}
		_, err = db.NewUpdate().Model(ev).Set(set).WherePK().Exec(ctx)
		require.NoError(t, err)
	}
	return ev
}

func TestDeadAndStatusCommands(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, db := schemaEnv(t)
	const dead = "dead_at = now(), attempts = 10, last_error = 'boom'"
	oldA := insertEvent(t, db, "a", "q1", "dead_at = now() - interval '40 days', attempts = 10")
	newA := insertEvent(t, db, "a", "q1", dead)
	insertEvent(t, db, "b", "q2", dead)
	insertEvent(t, db, "b", "q2", dead)
	insertEvent(t, db, "c", "q1", "created_at = now() - interval '2 minutes'")

	t.Run("MigrateStatusJSON", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "migrate", "status", "-json")
		require.Equal(t, 0, code, stderr)
		var ms []migrationJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &ms))
		require.NotEmpty(t, ms)
		for _, m := range ms {
			require.True(t, m.Applied, m.Name)
			require.NotNil(t, m.AppliedAt)
		}
	})

	t.Run("StatusByEvent", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "status", "-json")
		require.Equal(t, 0, code, stderr)
		var rep statusReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		require.Equal(t, int64(1), rep.Pending)
		require.Equal(t, int64(4), rep.Dead)
		require.Len(t, rep.Events, 3)
		require.Equal(t, eventStatus{Queue: "q1", EventName: "a", Dead: 2}, rep.Events[0])
		require.Equal(t, "c", rep.Events[1].EventName)
		require.Equal(t, int64(1), rep.Events[1].Pending)
		require.GreaterOrEqual(t, rep.Events[1].OldestPendingAge, 119.0)
		require.Equal(t, eventStatus{Queue: "q2", EventName: "b", Dead: 2}, rep.Events[2])

		code, stdout, stderr = runCLI(t, env, "status")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `QUEUE\s+EVENT\s+PENDING\s+OLDEST PENDING\s+DEAD\n`, stdout)
		require.Regexp(t, `q1\s+c\s+1\s+2m\d+s\s+0\n`, stdout)
		require.Regexp(t, `q2\s+b\s+0\s+-\s+2\n`, stdout)
	})

	t.Run("DeadListJSON", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "dead", "list", "-json")
		require.Equal(t, 0, code, stderr)
		var evs []deadEventJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &evs))
		require.Len(t, evs, 4)
		require.Equal(t, oldA.EventID.String(), evs[0].EventID)
		require.Equal(t, "q1", evs[0].Queue)
		require.Equal(t, "boom", evs[1].LastError)
		require.NotNil(t, evs[1].DeadAt)
	})

	t.Run("Purge", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "dead", "purge", "-older-than", "720h")
		require.Equal(t, 2, code, stdout)
		require.Contains(t, stderr, "would delete 1 dead event for good: add -yes to confirm")
		require.Equal(t, int64(4), outboxtest.Count(t, db, "outbox_events", "dead_at IS NOT NULL"), "nothing deleted without -yes")

		code, stdout, stderr = runCLI(t, env, "dead", "purge", "-older-than", "720h", "-name", "a", "-yes")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "1 dead event deleted\n", stdout)
		require.Zero(t, outboxtest.Count(t, db, "outbox_events", "event_id = ?", oldA.EventID))
	})

	t.Run("RetryByName", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "dead", "retry", "-name", "b")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "2 dead events put back in line\n", stdout)
		require.Equal(t, int64(1), outboxtest.Count(t, db, "outbox_events", "dead_at IS NOT NULL"))
	})

	t.Run("RetryAll", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "dead", "retry", "-all")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "1 dead event put back in line\n", stdout)
		require.Zero(t, outboxtest.Count(t, db, "outbox_events", "dead_at IS NOT NULL"))
		require.Equal(t, int64(1), outboxtest.Count(t, db, "outbox_events", "event_id = ? AND attempts = 0", newA.EventID))
	})

	t.Run("DeadListEmptyJSON", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "dead", "list", "-json")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "[]\n", stdout)
	})
}

func TestReconcileCommand(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, db := schemaEnv(t)
	queue := "reconcile_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	// One event Redis has, one it lost: both rows are marked published, only one task exists.
	kept := insertEvent(t, db, "r.kept", queue, "published_at = now()")
	lost := insertEvent(t, db, "r.lost", queue, "published_at = now()")
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	t.Cleanup(func() { _ = client.Close() })
	_, err := client.Enqueue(asynq.NewTask("r.kept", nil), asynq.TaskID(kept.EventID.String()), asynq.Queue(queue))
	require.NoError(t, err)
	t.Cleanup(func() {
		ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	})

	code, stdout, stderr := runCLI(t, env, "reconcile", "-json", "-window", "10m")
	require.Equal(t, 0, code, stderr)
	var rep reconcileReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Equal(t, 2, rep.Checked)
	require.Equal(t, 1, rep.Missing)
	require.Equal(t, 1, rep.Requeued)
	require.Equal(t, []missingEvent{{EventID: lost.EventID.String(), Queue: queue}}, rep.Events)
	require.Equal(t, int64(1), outboxtest.CountUndelivered(t, db, "event_id = ?", lost.EventID))

	code, stdout, stderr = runCLI(t, env, "reconcile")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "checked 1 events published within 1h0m0s: 0 missing from Redis, 0 requeued\n", stdout)
}

// syncBuffer is a bytes.Buffer safe for the relay's goroutines and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// get fetches url and returns the status code and body; code 0 when the request failed.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestRelayServesMetricsAndProbes runs `bunbox relay` on a Redis server of its own, drains a backlog, and
// checks /metrics (the histograms, and every metric the shipped dashboard and alert rules name), /healthz
// and /readyz, also while Redis is down.
func TestRelayServesMetricsAndProbes(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, db := schemaEnv(t)
	rd := outboxtest.StartRedis(t, nil)
	env["REDIS_ADDR"] = rd.Addr()
	for i := range 20 {
		insertEvent(t, db, []string{"m.a", "m.b"}[i%2], "metrics", "")
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		// The reconciler runs by default: no -reconcile-window needed.
		done <- run(ctx, []string{"relay", "-metrics-addr", addr, "-reconcile-interval", "50ms"},
			getenvOf(t, env), &stdout, &stderr)
	}()
	outboxtest.WaitFor(t, 30*time.Second, "the backlog drained", func() bool {
		return outboxtest.CountUndelivered(t, db, "") == 0
	})
	var body string
	outboxtest.WaitFor(t, 10*time.Second, "a reconciler pass and a scrape", func() bool {
		var code int
		code, body = get(t, "http://"+addr+"/metrics")
		return code == http.StatusOK && strings.Contains(body, "bunbox_reconciler_passes_total ")
	})
	require.Contains(t, body, "bunbox_relay_delivery_lag_seconds_count{queue=\"metrics\"} 20\n")
	require.Contains(t, body, "bunbox_relay_enqueue_duration_seconds_count 20\n")
	require.Contains(t, body, "bunbox_relay_round_duration_seconds_bucket")
	require.Contains(t, body, "bunbox_relay_enqueued_total{event_name=\"m.a\",queue=\"metrics\"} 10\n")
	requireDeployMetricsExported(t, body)

	code, text := get(t, "http://"+addr+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", text)
	code, text = get(t, "http://"+addr+"/readyz")
	require.Equal(t, http.StatusOK, code, text)
	var rep relay.Readiness
	require.NoError(t, json.Unmarshal([]byte(text), &rep))
	require.Equal(t, relay.Readiness{Ready: true, Postgres: "ok", Schema: "ok", Redis: "ok", Rounds: "ok", RedisEviction: "ok"}, rep)

	rd.Stop(t)
	code, text = get(t, "http://"+addr+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, text)
	require.NoError(t, json.Unmarshal([]byte(text), &rep))
	require.False(t, rep.Ready)
	require.Equal(t, "ok", rep.Postgres)
	require.NotEqual(t, "ok", rep.Redis)
	code, _ = get(t, "http://"+addr+"/healthz")
	require.Equal(t, http.StatusOK, code, "alive while Redis is down")

	rd.Start(t)
	outboxtest.WaitFor(t, 10*time.Second, "ready again", func() bool {
		code, _ := get(t, "http://"+addr+"/readyz")
		return code == http.StatusOK
	})
	cancel()
	require.Equal(t, 0, <-done, stderr.String())
}
