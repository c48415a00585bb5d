package relay

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// TestReadyzWhileRoundsFail: a Redis user that may PING but not run EVALSHA (asynq's enqueue script)
// makes every round fail with NOPERM while Redis answers: /readyz turns 503, naming the error, once the
// rounds have failed for longer than Config.UnreadyAfter, and 200 again after the permission is granted
// and a round succeeds.
func TestReadyzWhileRoundsFail(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	rds := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	require.Equal(t, "OK", rds.Cmd(t, "ACL", "SETUSER", "relay", "on", ">relay-secret", "~*", "&*", "+@all", "-evalsha", "-eval"))
	db, _ := outboxtest.Schema(t)
	b := setupWith(t, db, asynq.RedisClientOpt{Addr: rds.Addr(), Username: "relay", Password: "relay-secret"})
	insertEvents(t, db, b.queue, 3)
	r, err := New(db, b.redis, Config{Logger: b.logs.logger(), PollInterval: 20 * time.Millisecond,
		RoundBackoff: 10 * time.Millisecond, RoundBackoffMax: 50 * time.Millisecond, UnreadyAfter: 300 * time.Millisecond,
		DisableReconciler: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	h := r.HealthHandler()
	code, body := get(t, h, "/readyz")
	require.Equal(t, http.StatusOK, code, "no round has run yet: %s", body)

	start := time.Now()
	run(t, r)
	var rep Readiness
	outboxtest.WaitFor(t, 10*time.Second, "/readyz answers 503", func() bool {
		code, body = get(t, h, "/readyz")
		return code == http.StatusServiceUnavailable
	})
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "not before UnreadyAfter")
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.False(t, rep.Ready)
	require.Equal(t, "ok", rep.Redis, "Redis answers PING: only the rounds fail")
	require.Contains(t, rep.Rounds, "failing for ")
	require.Contains(t, rep.Rounds, "longer than Config.UnreadyAfter 300ms")
	require.Contains(t, rep.Rounds, "NOPERM")
	require.NotContains(t, body, "relay-secret")

	require.Equal(t, "OK", rds.Cmd(t, "ACL", "SETUSER", "relay", "+evalsha", "+eval"))
	outboxtest.WaitFor(t, 10*time.Second, "/readyz answers 200 again", func() bool {
		code, body = get(t, h, "/readyz")
		return code == http.StatusOK
	})
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.Equal(t, "ok", rep.Rounds)
	// The first round that succeeds makes the relay ready; with the stream's lanes the three rows may
	// take a round each.
	outboxtest.WaitFor(t, 10*time.Second, "the three rows delivered", func() bool { return published(t, db) == 3 })
}

// TestRoundHealthBound: the rounds' state is ok until they have failed for longer than the bound, and
// never with a negative bound; a success clears it.
func TestRoundHealthBound(t *testing.T) {
	t.Parallel()
	var h roundHealth
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	require.Equal(t, "ok", h.state(30*time.Second, t0))
	h.record(errTest("first"), t0)
	h.record(errTest("NOPERM evalsha"), t0.Add(20*time.Second))
	require.Equal(t, "ok", h.state(30*time.Second, t0.Add(30*time.Second)))
	require.Equal(t, "failing for 31s (since 2026-12-04T10:00:00Z, longer than Config.UnreadyAfter 30s): NOPERM evalsha",
		h.state(30*time.Second, t0.Add(31*time.Second)))
	require.Equal(t, "ok", h.state(-1, t0.Add(time.Hour)))
	h.record(nil, t0.Add(32*time.Second))
	require.Equal(t, "ok", h.state(30*time.Second, t0.Add(time.Hour)))
}

type errTest string

func (e errTest) Error() string { return string(e) }
