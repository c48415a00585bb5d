package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestSchemaFlag runs the commands on the outbox of a schema, named with -schema (before or after the
// command) or OUTBOX_SCHEMA, with no search_path: migrate up twice, status, dead list and retry, cancel,
// and schema's SQL; a bad name is refused with exit code 2, naming it.
func TestSchemaFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.OpenDirect(t, nil)
	s := outboxtest.RandomName("Tenant_Cli_")
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+s+`" CASCADE`) })
	env := map[string]string{"DATABASE_URL": outboxtest.DatabaseURL(), "REDIS_ADDR": outboxtest.RedisAddr()}

	for range 2 {
		code, stdout, stderr := runCLI(t, env, "migrate", "up", "-schema", s)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "up to date")
	}
	code, stdout, stderr := runCLI(t, env, "-schema", s, "migrate", "status")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "\tno")

	ob := bunx.New(db, bunx.WithLocation(model.Location{Schema: s}))
	dead, err := model.NewEvent("tenant.dead", nil)
	require.NoError(t, err)
	pending, err := model.NewEvent("tenant.pending", nil)
	require.NoError(t, err)
	require.NoError(t, ob.Record(ctx, db, dead, pending))
	_, err = db.NewRaw(`UPDATE "`+s+`".outbox_events SET published_at = NULL, dead_at = now() WHERE event_id = ?`, dead.EventID).Exec(ctx)
	require.NoError(t, err)

	withEnv := map[string]string{"OUTBOX_SCHEMA": s}
	for k, v := range env {
		withEnv[k] = v
	}
	code, stdout, stderr = runCLI(t, withEnv, "status", "-json", "-asynq=false")
	require.Equal(t, 0, code, stderr)
	var st struct{ Pending, Dead int64 }
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	require.Equal(t, int64(1), st.Pending)
	require.Equal(t, int64(1), st.Dead)

	code, stdout, stderr = runCLI(t, env, "dead", "list", "-schema", s)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, dead.EventID.String())
	code, _, stderr = runCLI(t, env, "dead", "retry", "-schema", s, dead.EventID.String())
	require.Equal(t, 0, code, stderr)
	code, _, stderr = runCLI(t, env, "cancel", "-schema", s, pending.EventID.String())
	require.Equal(t, 0, code, stderr)
	var cancelled, revived int
	require.NoError(t, db.NewRaw(`SELECT count(*) FILTER (WHERE cancelled_at IS NOT NULL), count(*) FILTER (WHERE dead_at IS NULL AND attempts = 0)
		FROM "`+s+`".outbox_events`).Scan(ctx, &cancelled, &revived))
	require.Equal(t, 1, cancelled)
	require.Equal(t, 2, revived)

	code, stdout, stderr = runCLI(t, nil, "schema", "-schema", s)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `CREATE SCHEMA IF NOT EXISTS "`+s+`"`)
	require.Contains(t, stdout, `CREATE TABLE IF NOT EXISTS "`+s+`".outbox_events`)
	code, stdout, stderr = runCLI(t, nil, "schema", "-format", "goose", "-schema", s)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `CREATE SCHEMA IF NOT EXISTS "`+s+`"`)
	require.NotContains(t, stdout, "ON outbox_events", "every table is qualified")
	require.Contains(t, stdout, `DROP INDEX IF EXISTS "`+s+`".outbox_events_cancelled_idx`)

	for _, args := range [][]string{{"status", "-schema", `a"b`}, {"-schema", "1x", "migrate", "up"}} {
		code, _, stderr = runCLI(t, env, args...)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, "invalid schema name")
	}
	code, _, stderr = runCLI(t, map[string]string{"OUTBOX_SCHEMA": "x;y", "DATABASE_URL": outboxtest.DatabaseURL()}, "dead", "list")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `-schema (OUTBOX_SCHEMA): invalid schema name "x;y"`)
}
