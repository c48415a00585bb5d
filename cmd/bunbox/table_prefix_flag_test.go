package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestTablePrefixFlag runs the commands on one of two outboxes with table prefixes in one schema, named
// with -table-prefix (before or after the command) or OUTBOX_TABLE_PREFIX: migrate up twice and status,
// status, dead list and retry, schema's SQL, and relay (with -enable-notify), which delivers the rows
// of its outbox and not those of the other, and whose /metrics read its table; a bad prefix is refused
// with exit code 2, naming it.
func TestTablePrefixFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.OpenDirect(t, nil)
	s := outboxtest.RandomName("tenant_cli_p_")
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+s+`" CASCADE`) })
	queue := outboxtest.RandomName("cli_prefix_")
	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	t.Cleanup(func() {
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	})
	env := map[string]string{"DATABASE_URL": outboxtest.DatabaseURL(), "REDIS_ADDR": outboxtest.RedisAddr()}

	for _, p := range []string{"orders_", "billing_"} {
		for range 2 {
			code, stdout, stderr := runCLI(t, env, "migrate", "up", "-schema", s, "-table-prefix", p)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, "up to date")
		}
	}
	code, stdout, stderr := runCLI(t, env, "-schema", s, "-table-prefix", "orders_", "migrate", "status")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "\tno")

	record := func(prefix, name string) *model.Event {
		ev, err := model.NewEvent(name, nil, model.WithQueue(queue))
		require.NoError(t, err)
		require.NoError(t, bunx.New(db, bunx.WithLocation(model.Location{Schema: s, TablePrefix: prefix})).Record(ctx, db, ev))
		return ev
	}
	dead := record("orders_", "orders.dead")
	record("orders_", "orders.pending")
	billing := record("billing_", "billing.pending")
	_, err := db.NewRaw(`UPDATE "`+s+`".orders_outbox_events SET published_at = NULL, dead_at = now() WHERE event_id = ?`, dead.EventID).Exec(ctx)
	require.NoError(t, err)

	withEnv := map[string]string{"OUTBOX_SCHEMA": s, "OUTBOX_TABLE_PREFIX": "orders_"}
	for k, v := range env {
		withEnv[k] = v
	}
	code, stdout, stderr = runCLI(t, withEnv, "status", "-json", "-asynq=false")
	require.Equal(t, 0, code, stderr)
	var st struct{ Pending, Dead int64 }
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	require.Equal(t, int64(1), st.Pending)
	require.Equal(t, int64(1), st.Dead)

	code, stdout, stderr = runCLI(t, env, "dead", "list", "-schema", s, "-table-prefix", "orders_")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, dead.EventID.String())
	code, stdout, stderr = runCLI(t, env, "dead", "list", "-schema", s, "-table-prefix", "billing_")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, dead.EventID.String(), "billing_'s dead list")
	code, _, stderr = runCLI(t, env, "-table-prefix", "orders_", "dead", "retry", "-schema", s, dead.EventID.String())
	require.Equal(t, 0, code, stderr)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var rout, rerr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(rctx, []string{"relay", "-schema", s, "-table-prefix", "orders_", "-enable-notify", "-metrics-addr", addr, "-reconcile-window", "10m"},
			getenvOf(t, env), &rout, &rerr)
	}()
	outboxtest.WaitFor(t, 60*time.Second, "the relay of orders_ published its two rows", func() bool {
		var left int
		require.NoError(t, db.NewRaw(`SELECT count(*) FROM "`+s+`".orders_outbox_events WHERE published_at IS NULL`).Scan(ctx, &left))
		return left == 0
	})
	var body string
	outboxtest.WaitFor(t, 30*time.Second, "the relay's /metrics", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	require.Contains(t, body, "bunbox_outbox_up 1\n")
	require.Contains(t, body, "bunbox_outbox_backlog 0\n", "the backlog of orders_, not billing_'s one row")
	cancel()
	require.Equal(t, 0, <-done, rerr.String())
	var billingLeft int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM "`+s+`".billing_outbox_events WHERE (published_at IS NULL OR published_at = 'infinity') AND event_id = ?`, billing.EventID).Scan(ctx, &billingLeft))
	require.Equal(t, 1, billingLeft, "the relay of orders_ leaves billing_'s row")
	qi, err := ins.GetQueueInfo(queue)
	require.NoError(t, err)
	require.Equal(t, 2, qi.Size, "orders_'s two events, nothing of billing_'s")
	var triggers int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(?)`, `"`+s+`".orders_outbox_events`).Scan(ctx, &triggers))
	require.Equal(t, 1, triggers, "-enable-notify installed the trigger on orders_'s table")

	code, stdout, stderr = runCLI(t, nil, "schema", "-schema", s, "-table-prefix", "orders_")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `CREATE TABLE IF NOT EXISTS "`+s+`".orders_outbox_events`)
	code, stdout, stderr = runCLI(t, nil, "schema", "-format", "goose", "-table-prefix", "orders_")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "CREATE SCHEMA")
	require.NotContains(t, stdout, "ON outbox_events", "every table is prefixed")
	require.Contains(t, stdout, `DROP INDEX IF EXISTS orders_outbox_events_cancelled_idx`)

	for _, args := range [][]string{{"status", "-table-prefix", `a"b`}, {"-table-prefix", "Orders_", "migrate", "up"}} {
		code, _, stderr = runCLI(t, env, args...)
		require.Equal(t, 2, code, stderr)
		require.Contains(t, stderr, "invalid table prefix")
	}
	code, _, stderr = runCLI(t, map[string]string{"OUTBOX_TABLE_PREFIX": "x;y", "DATABASE_URL": outboxtest.DatabaseURL()}, "dead", "list")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `-table-prefix (OUTBOX_TABLE_PREFIX): invalid table prefix "x;y"`)
}
