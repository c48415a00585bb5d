package relay_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// restrictedRole creates a login role that is neither superuser nor a member of pg_read_all_stats, with
// what a reconciler needs in schema (read and requeue rows), and returns a pool of it in that schema. The
// role is dropped when the test ends.
func restrictedRole(t *testing.T, admin *bun.DB, schema string) *bun.DB {
	t.Helper()
	ctx := context.Background()
	role := "bunbox_blind_" + schema[len("bunbox_test_"):]
	password := "pw" + schema[len("bunbox_test_"):]
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN NOSUPERUSER NOINHERIT PASSWORD '" + password + "'",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, UPDATE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
	} {
		_, err := admin.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() { // after the role's pool is closed (cleanups run last first)
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := admin.ExecContext(context.Background(), stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	u, err := url.Parse(outboxtest.DatabaseURL())
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)
	db := outboxtest.OpenURL(t, u.String(), map[string]any{"search_path": schema})
	var privileged bool
	require.NoError(t, db.NewRaw("SELECT rolsuper OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') FROM pg_roles WHERE rolname = current_user").
		Scan(ctx, &privileged))
	require.False(t, privileged, "the role must not see other roles' sessions")
	return db
}

// Under a role without pg_read_all_stats, pg_stat_activity hides when a relay's transaction began. A
// round that began before a pass, and enqueued its task after the pass wrote its markers, stamps its row
// with a published_at older than the pass: the reconciler must still check that row at the next pass
// (here the task is lost while the markers stay, as in a failover to a replica that had the markers).
func TestReconcilerUnderRoleWithoutReadAllStats(t *testing.T) {
	outboxtest.SkipPooled(t, "it creates a login role, which the test PgBouncer has no auth entry for, and grants on a schema the pooler pass does not make; the direct pass runs it")
	t.Parallel()
	ctx := context.Background()
	db, schema := outboxtest.Schema(t)
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	b := &reconcileBundle{db: db, redis: rd, opt: asynq.RedisClientOpt{Addr: rd.Addr()}, queue: "blind"}
	b.inspector = asynq.NewInspector(b.opt)
	t.Cleanup(func() { _ = b.inspector.Close() })
	blind := restrictedRole(t, db, schema)

	b.insert(t, 5)
	b.relayAll(t)
	rc, err := relay.NewReconciler(blind, b.opt, relay.ReconcilerConfig{Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close() })
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.True(t, res.Swept)
	require.GreaterOrEqual(t, res.Checked, 5)

	// A round begins after that pass: the role cannot see when.
	late := b.insert(t, 1)[0]
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var pid int
	require.NoError(t, tx.NewRaw("SELECT pg_backend_pid()").Scan(ctx, &pid))
	var hiddenStart *time.Time
	require.NoError(t, blind.NewRaw("SELECT xact_start FROM pg_stat_activity WHERE pid = ?", pid).Scan(ctx, &hiddenStart))
	require.Nil(t, hiddenStart, "pg_stat_activity hides the round's start from the role")

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.False(t, res.Swept)
	require.GreaterOrEqual(t, res.HiddenTransactions, 1, "the pass knows what it cannot see")

	// The round enqueues after the pass wrote its markers, marks its row with its start and commits.
	client := asynq.NewClient(b.opt)
	defer client.Close()
	_, err = client.Enqueue(asynq.NewTask(late.Name, late.Payload), asynq.TaskID(late.EventID.String()), asynq.Queue(b.queue))
	require.NoError(t, err)
	_, err = tx.NewRaw("UPDATE outbox_events SET published_at = now() WHERE event_id = ?", late.EventID).Exec(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	// Redis loses the task and keeps the markers.
	require.NoError(t, b.inspector.DeleteTask(b.queue, late.EventID.String()))

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.False(t, res.Swept, "the markers are there: an incremental pass")
	require.Equal(t, []relay.MissingTask{{EventID: late.EventID, Queue: b.queue}}, res.MissingTasks)
	require.Equal(t, 1, res.Requeued)
	require.EqualValues(t, 1, outboxtest.CountUndelivered(t, db, "event_id = ?", late.EventID))
	b.relayAll(t)
	b.requireTasks(t, []*model.Event{late})
}

// A reconciler whose role may read and update the outbox but not write bunbox_stream_marks says once at
// Warn that it cannot keep the stream's time marks, names the GRANT, and its passes succeed as before.
func TestReconcilerWithoutMarksPrivilege(t *testing.T) {
	outboxtest.SkipPooled(t, "it creates a login role, which the test PgBouncer has no auth entry for; the direct pass runs it")
	t.Parallel()
	ctx := context.Background()
	db, schema := outboxtest.Schema(t)
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	require.NoError(t, relay.EnableStream(ctx, db, model.Location{}))
	blind := restrictedRole(t, db, schema)
	var logs bytes.Buffer // the passes run on this goroutine
	rc, err := relay.NewReconciler(blind, asynq.RedisClientOpt{Addr: rd.Addr()},
		relay.ReconcilerConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close() })
	for range 2 {
		_, err := rc.ReconcileOnce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, 1, strings.Count(logs.String(), "cannot keep the stream's time marks"), logs.String())
	require.Contains(t, logs.String(), "GRANT SELECT, INSERT, DELETE")
	require.Zero(t, outboxtest.Count(t, db, "bunbox_stream_marks", "true"))
}
