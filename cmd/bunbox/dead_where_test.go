package main

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// TestDeadRetrySaysWhereTheEventIs: `dead retry` of ids that are not dead exits 1 and says, per id, where
// the event is; the dead ones among them are still put back.
func TestDeadRetrySaysWhereTheEventIs(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, db := schemaEnv(t)
	dead := insertEvent(t, db, "a", "q1", "dead_at = now(), attempts = 10")
	pending := insertEvent(t, db, "a", "q1", "")
	retrying := insertEvent(t, db, "a", "q1", "attempts = 3, next_attempt_at = '2031-01-02 03:04:05+00'")
	published := insertEvent(t, db, "a", "q1", "published_at = '2030-01-02 03:04:05+00'")
	cancelled := insertEvent(t, db, "a", "q1", "cancelled_at = '2030-02-03 04:05:06+00'")
	unknown := uuid.New()

	code, stdout, stderr := runCLI(t, env, "dead", "retry", pending.EventID.String())
	require.Equal(t, 1, code, stdout)
	require.Equal(t, "0 of 1 event put back in line\n", stdout)
	require.Contains(t, stderr, pending.EventID.String()+": not dead: pending: it waits in the stream for a relay's stream round")

	code, stdout, stderr = runCLI(t, env, "dead", "retry", dead.EventID.String(), retrying.EventID.String(),
		published.EventID.String(), cancelled.EventID.String(), unknown.String())
	require.Equal(t, 1, code, stdout)
	require.Equal(t, "1 of 5 events put back in line\n", stdout)
	for _, want := range []string{
		retrying.EventID.String() + ": not dead: pending: the relay retries it at 2031-01-02T03:04:05Z (3 failed attempts)",
		published.EventID.String() + ": not dead: published at 2030-01-02T03:04:05Z: its task is asynq's (`bunbox tasks list`)",
		cancelled.EventID.String() + ": not dead: cancelled at 2030-02-03T04:05:06Z",
		unknown.String() + ": not in the outbox",
		"4 of 5 events not put back",
	} {
		require.Contains(t, stderr, want)
	}
	require.NotContains(t, stderr, dead.EventID.String())
	require.Equal(t, int64(1), outboxtest.Count(t, db, "outbox_events", "event_id = ? AND dead_at IS NULL AND attempts = 0", dead.EventID))

	code, stdout, stderr = runCLI(t, env, "dead", "retry", "-all")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "0 dead events put back in line\n", stdout)
}

// TestDeadListShowsBadRows: a dead row whose metadata raw SQL wrote as a non-string does not fail
// `dead list`: every row is listed, the bad one marked, in the table and in JSON.
func TestDeadListShowsBadRows(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, db := schemaEnv(t)
	good := insertEvent(t, db, "good", "q1", "dead_at = now(), attempts = 10")
	bad := insertEvent(t, db, "bad", "q1", "dead_at = now(), attempts = 10")
	_, err := db.NewRaw(`UPDATE outbox_events SET metadata = '{"k": 5}', created_at = 'infinity' WHERE event_id = ?`, bad.EventID).Exec(t.Context())
	require.NoError(t, err)

	code, stdout, stderr := runCLI(t, env, "dead", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, good.EventID.String())
	require.Contains(t, stdout, bad.EventID.String()+" (bad row)")
	require.Contains(t, stdout, `1 bad row written around bunx`)
	require.Contains(t, stdout, `metadata {"k": 5} is not a JSON object of strings; created_at is infinity`)

	code, stdout, stderr = runCLI(t, env, "dead", "list", "-json")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, strings.Count(stdout, `"bad_row"`), stdout)

	code, stdout, stderr = runCLI(t, env, "status")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `dead\s+2\n`, stdout)
}
