package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/ui"
	"github.com/bunbox/bunbox/worker"
)

// grantsDoc is the page whose roles, grants and Redis ACL TestComponentsUnderDocumentedGrants runs.
var grantsDoc = filepath.Join(repoRoot, "docs", "deploy.md")

// documentedGrants are the statements of grantsDoc's "Roles and grants": the roles (before the
// migrations), the grants on the tables (after them), and the Redis ACL.
type documentedGrants struct {
	roles, tables, acl []string
}

// readDocumentedGrants reads grantsDoc's "## Roles and grants" section: its first ```sql block (the
// roles), its second (the grants on the tables) and its ```text block of ACL SETUSER lines.
func readDocumentedGrants(t *testing.T) documentedGrants {
	t.Helper()
	raw, err := os.ReadFile(grantsDoc)
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(raw), "\n## Roles and grants\n")
	require.True(t, ok, "%s has a section ## Roles and grants", grantsDoc)
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var sql [][]string
	var d documentedGrants
	for _, m := range regexp.MustCompile("(?s)```(\\w+)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		switch m[1] {
		case "sql":
			sql = append(sql, sqlStatements(m[2]))
		case "text":
			for _, l := range strings.Split(strings.TrimSpace(m[2]), "\n") {
				require.True(t, strings.HasPrefix(l, "ACL SETUSER "), "the ACL block holds ACL SETUSER lines: %q", l)
				d.acl = append(d.acl, l)
			}
		}
	}
	require.Len(t, sql, 2, "two SQL blocks: the roles, then the grants on the tables")
	require.NotEmpty(t, d.acl)
	d.roles, d.tables = sql[0], sql[1]
	return d
}

// sqlStatements splits a block of SQL into statements, comments dropped and blanks folded.
func sqlStatements(block string) []string {
	var b strings.Builder
	for _, l := range strings.Split(block, "\n") {
		l, _, _ = strings.Cut(l, "--")
		b.WriteString(l + " ")
	}
	var out []string
	for _, s := range strings.Split(b.String(), ";") {
		if s = strings.Join(strings.Fields(s), " "); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// grantsBundle is a schema with the documented roles, their connection strings, and a Redis server with
// the documented users.
type grantsBundle struct {
	schema   string
	admin    *bun.DB           // a superuser, in the schema
	password string            // every role's and every Redis user's
	roles    map[string]string // the doc's role name -> the test's role name
	redis    *outboxtest.Redis
	rdb      *redis.Client // Redis's default user, for the test's setup and checks
}

// dbURL is the database URL of the doc's role, working in the schema.
func (b *grantsBundle) dbURL(t *testing.T, role string) string {
	t.Helper()
	name, ok := b.roles[role]
	require.True(t, ok, "the doc creates no role %s", role)
	u, err := url.Parse(outboxtest.DatabaseURL())
	require.NoError(t, err)
	u.User = url.UserPassword(name, b.password)
	q := u.Query()
	q.Set("search_path", b.schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// openAs opens a pool as the doc's role, in the schema.
func (b *grantsBundle) openAs(t *testing.T, role string) *bun.DB {
	t.Helper()
	return outboxtest.OpenURL(t, b.dbURL(t, role), nil)
}

// redisURL is the Redis URL of the doc's Redis user.
func (b *grantsBundle) redisURL(user string) string {
	return "redis://" + user + ":" + b.password + "@" + b.redis.Addr() + "/0"
}

// env is the CLI's environment as the doc's role and Redis user.
func (b *grantsBundle) env(t *testing.T, role, redisUser string) map[string]string {
	t.Helper()
	env := map[string]string{"DATABASE_URL": b.dbURL(t, role), "REDIS_ADDR": "127.0.0.1:1"}
	if redisUser != "" {
		env["REDIS_URL"] = b.redisURL(redisUser)
	}
	return env
}

// cli runs the CLI as the doc's role and Redis user and fails unless it exits 0.
func (b *grantsBundle) cli(t *testing.T, role, redisUser string, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, b.env(t, role, redisUser), args...)
	require.Equal(t, 0, code, "bunbox %q as %s: stdout %s\nstderr %s", args, role, stdout, stderr)
	requireNoPrivilegeError(t, stdout+stderr)
	return stdout
}

// requireNoPrivilegeError fails if out holds a refusal of PostgreSQL or Redis, or a warning.
func requireNoPrivilegeError(t *testing.T, out string) {
	t.Helper()
	for _, s := range []string{"permission denied", "NOPERM", "level=WARN", "level=ERROR", "must be owner", "could not"} {
		require.NotContains(t, out, s)
	}
}

// taskInRedis reports whether asynq holds the task of event id in queue.
func (b *grantsBundle) taskInRedis(t *testing.T, queue string, id string) bool {
	t.Helper()
	n, err := b.rdb.Exists(context.Background(), "asynq:{"+queue+"}:t:"+id).Result()
	require.NoError(t, err)
	return n == 1
}

// setupGrants creates a fresh schema, the doc's roles with exactly its statements (the role names made
// unique to the test, the schema put for public), applies the migrations as the migrations' role, runs
// the doc's grants on the tables as that role (the owner), and starts a Redis with the doc's users.
func setupGrants(t *testing.T) *grantsBundle {
	t.Helper()
	doc := readDocumentedGrants(t)
	ctx := context.Background()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	b := &grantsBundle{schema: outboxtest.NewSchema(t), password: "pw" + hex.EncodeToString(rnd[:]), roles: map[string]string{}}
	suffix := "_" + hex.EncodeToString(rnd[:3])
	b.admin = outboxtest.OpenDirect(t, map[string]any{"search_path": b.schema})

	createRole := regexp.MustCompile(`^CREATE ROLE (\w+)\b`)
	for _, s := range doc.roles {
		if m := createRole.FindStringSubmatch(s); m != nil {
			b.roles[m[1]] = m[1] + suffix
		}
	}
	for _, role := range []string{"bunbox_migrate", "bunbox_producer", "bunbox_relay", "bunbox_reconciler",
		"bunbox_worker", "bunbox_reader", "bunbox_operator"} {
		require.Contains(t, b.roles, role, "the doc creates the role %s", role)
	}
	rewrite := func(s string) string {
		for doc, name := range b.roles {
			s = regexp.MustCompile(`\b`+doc+`\b`).ReplaceAllString(s, name)
		}
		return strings.ReplaceAll(s, "SCHEMA public", "SCHEMA "+b.schema)
	}
	t.Cleanup(func() { // after the roles' pools are closed, and before the schema is dropped
		for _, name := range b.roles {
			for _, stmt := range []string{"DROP OWNED BY " + name, "DROP ROLE " + name} {
				if _, err := b.admin.ExecContext(context.Background(), stmt); err != nil {
					t.Logf("%s: %v", stmt, err)
				}
			}
		}
	})
	for _, s := range doc.roles {
		_, err := b.admin.ExecContext(ctx, rewrite(s))
		require.NoError(t, err, rewrite(s))
	}
	for _, name := range b.roles { // the doc leaves passwords to the reader's cluster
		_, err := b.admin.ExecContext(ctx, "ALTER ROLE "+name+" PASSWORD '"+b.password+"'")
		require.NoError(t, err)
	}

	b.cli(t, "bunbox_migrate", "", "migrate", "up")
	b.cli(t, "bunbox_migrate", "", "migrate", "status", "-json")
	owner := b.openAs(t, "bunbox_migrate")
	for _, s := range doc.tables {
		_, err := owner.ExecContext(ctx, rewrite(s))
		require.NoError(t, err, "as the migrations' role: %s", rewrite(s))
	}

	// The default user needs a password: a client that dropped its user name is refused, not let in.
	b.redis = outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true, Password: "admin" + b.password})
	b.rdb = redis.NewClient(&redis.Options{Addr: b.redis.Addr(), Password: "admin" + b.password})
	t.Cleanup(func() { _ = b.rdb.Close() })
	for _, line := range doc.acl {
		var args []any
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, ">") {
				f = ">" + b.password
			}
			args = append(args, f)
		}
		require.NoError(t, b.rdb.Do(ctx, args...).Err(), line)
	}
	return b
}

// TestComponentsUnderDocumentedGrants runs each part of bunbox under the role and the Redis user that
// docs/deploy.md gives it, created with exactly the page's statements: the migrations, the producer
// (Record in a transaction, Dispatch, Cancel), `bunbox relay` (with its reconciler and cleanup, per row and
// then with the stream on), a reconciler run apart, a worker's inbox and its cleaner, the read-only
// commands and page, and the operator's commands. Each must succeed without a refusal or a warning.
func TestComponentsUnderDocumentedGrants(t *testing.T) { // not parallel: the relay reads OUTBOX_* from the process
	outboxtest.SkipShort(t)
	outboxtest.SkipPooled(t, "it creates login roles, which the test PgBouncer has no auth entry for; the direct pass runs it")
	t.Setenv("OUTBOX_CLEANUP_INTERVAL", "50ms") // the relay's cleanup runs (and deletes what is old enough) within the test
	b := setupGrants(t)
	ctx := context.Background()
	const queue = "default"

	// The producer: Record in a transaction, Dispatch in a Transactor's, Cancel.
	producer := b.openAs(t, "bunbox_producer")
	ob := bunx.New(producer)
	newEvent := func(name string, opts ...model.Option) *model.Event {
		ev, err := model.NewEvent(name, map[string]string{"order": name}, opts...)
		require.NoError(t, err)
		return ev
	}
	placed, keyed, cancelled := newEvent("order.placed"), newEvent("account.changed", model.WithOrderingKey("acct-1")), newEvent("cart.remind")
	require.NoError(t, producer.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return ob.Record(ctx, tx, placed, keyed)
	}))
	require.NoError(t, bunx.NewTransactor(producer).WithinTransaction(ctx, func(ctx context.Context) error {
		if err := ob.Dispatch(ctx, cancelled); err != nil {
			return err
		}
		tx, _ := bunx.TxFromContext(ctx)
		return ob.Cancel(ctx, tx, cancelled.EventID)
	}))

	// The relay, with its reconciler and cleanup.
	addr, stopRelay := b.startRelay(t)
	outboxtest.WaitFor(t, 30*time.Second, "the relay delivered the events", func() bool {
		return b.taskInRedis(t, queue, placed.EventID.String()) && b.taskInRedis(t, queue, keyed.EventID.String()) &&
			outboxtest.CountUndelivered(t, b.admin, "cancelled_at IS NULL") == 0
	})
	require.False(t, b.taskInRedis(t, queue, cancelled.EventID.String()), "the cancelled event is never delivered")
	reconcilerPassed := regexp.MustCompile(`(?m)^bunbox_reconciler_passes_total [1-9]`)
	outboxtest.WaitFor(t, 30*time.Second, "a reconciler pass, and the relay ready", func() bool {
		code, body := get(t, "http://"+addr+"/metrics")
		ready, _ := get(t, "http://"+addr+"/readyz")
		return code == http.StatusOK && reconcilerPassed.MatchString(body) && ready == http.StatusOK
	})
	code, readiness := get(t, "http://"+addr+"/readyz")
	require.Equal(t, http.StatusOK, code, readiness)
	require.Contains(t, readiness, `"redis_eviction":"ok"`, "the relay's user may read the eviction policy")

	// A worker: an asynq server whose handler records each event in the inbox; the inbox's cleaner.
	workerDB := b.openAs(t, "bunbox_worker")
	inbox := worker.NewInbox(workerDB)
	wopt := asynq.RedisClientOpt{Addr: b.redis.Addr(), Username: "bunbox_worker", Password: b.password}
	asynqLog := &asynqLogger{}
	srv := asynq.NewServer(wopt, worker.ServerConfig(asynq.Config{Queues: map[string]int{queue: 1}, Logger: asynqLog}))
	mux := asynq.NewServeMux()
	for _, name := range []string{placed.Name, keyed.Name} {
		mux.Handle(name, worker.HandleJSON(inbox, "grants", func(ctx context.Context, tx bun.Tx, p *map[string]string) error {
			return nil
		}))
	}
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	outboxtest.WaitFor(t, 30*time.Second, "the worker handled both events", func() bool {
		return outboxtest.Count(t, b.admin, "inbox_events", "") == 2
	})
	cleaner, err := worker.NewInboxCleaner(inbox, worker.InboxCleanerConfig{})
	require.NoError(t, err)
	_, err = cleaner.Cleanup(ctx)
	require.NoError(t, err, "the inbox's cleaner deletes old records")

	// A reconciler run apart, with the relay stopped: Redis lost a task, the reconciler puts its event back
	// in line, the relay delivers it again, and the inbox skips the repeat.
	stopRelay()
	outboxtest.WaitFor(t, 30*time.Second, "asynq completed the task", func() bool {
		state, err := b.rdb.HGet(ctx, "asynq:{"+queue+"}:t:"+placed.EventID.String(), "state").Result()
		return err == nil && state == "completed"
	})
	require.NoError(t, b.rdb.Del(ctx, "asynq:{"+queue+"}:t:"+placed.EventID.String()).Err())
	require.NoError(t, b.rdb.ZRem(ctx, "asynq:{"+queue+"}:completed", placed.EventID.String()).Err())
	var rep reconcileReport
	require.NoError(t, json.Unmarshal([]byte(b.cli(t, "bunbox_reconciler", "bunbox_reconciler", "reconcile", "-json")), &rep))
	require.Equal(t, 1, rep.Requeued, "the lost task's event is back in line")
	addr, stopRelay = b.startRelay(t)
	outboxtest.WaitFor(t, 30*time.Second, "the requeued event delivered again", func() bool {
		return b.taskInRedis(t, queue, placed.EventID.String())
	})

	// The read-only commands, and the page without a token.
	for _, args := range [][]string{{"status", "-json"}, {"status", "-asynq=false"}, {"dead", "list", "-json"},
		{"stream", "status", "-json"}} {
		b.cli(t, "bunbox_reader", "bunbox_reader", args...)
	}
	reader := b.openAs(t, "bunbox_reader")
	ropt := asynq.RedisClientOpt{Addr: b.redis.Addr(), Username: "bunbox_reader", Password: b.password}
	page, err := ui.New(reader, ui.Config{Redis: ropt, Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = page.Close() })
	for _, path := range []string{"/", "/events?state=pending", "/events?state=scheduled", "/events?state=dead", "/event?id=" + placed.EventID.String()} {
		rec := httptest.NewRecorder()
		page.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Body)
		require.Equal(t, http.StatusOK, rec.Code, "GET %s as the reader:\n%s", path, body)
		requireNoPrivilegeError(t, string(body))
	}

	// The operator's commands: a dead event put back in line (the relay delivers it), a purge, a cancel of
	// a published event (the relay takes its task out of asynq).
	dead := insertEvent(t, b.admin, "order.failed", queue, "dead_at = now(), attempts = 10, last_error = 'boom'")
	purged := insertEvent(t, b.admin, "order.failed", queue, "dead_at = now() - interval '40 days', attempts = 10")
	b.cli(t, "bunbox_operator", "bunbox_reader", "dead", "retry", dead.EventID.String())
	b.cli(t, "bunbox_operator", "bunbox_reader", "dead", "purge", "-older-than", "720h", "-yes")
	require.Zero(t, outboxtest.Count(t, b.admin, "outbox_events", "event_id = ?", purged.EventID))
	outboxtest.WaitFor(t, 30*time.Second, "the retried event delivered", func() bool {
		return b.taskInRedis(t, queue, dead.EventID.String())
	})
	b.cli(t, "bunbox_operator", "bunbox_reader", "cancel", "-wait", "20s", dead.EventID.String())

	// The stream: turned on by the owner; the relay delivers by the cursor, the reconcilers check it.
	b.cli(t, "bunbox_migrate", "", "stream", "on")
	streamed := newEvent("order.streamed")
	require.NoError(t, producer.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return ob.Record(ctx, tx, streamed)
	}))
	outboxtest.WaitFor(t, 30*time.Second, "the relay delivered the streamed event", func() bool {
		return b.taskInRedis(t, queue, streamed.EventID.String())
	})
	b.cli(t, "bunbox_reader", "bunbox_reader", "stream", "status", "-json")
	b.cli(t, "bunbox_reconciler", "bunbox_reconciler", "reconcile", "-json")
	outboxtest.WaitFor(t, 30*time.Second, "a reconciler pass of the relay's over the stream", func() bool {
		return outboxtest.Count(t, b.admin, "bunbox_stream_marks", "") > 0
	})

	stopRelay()
	srv.Shutdown()
	require.Equal(t, int64(2), outboxtest.Count(t, b.admin, "inbox_events", ""), "the repeat was skipped")
	require.Empty(t, asynqLog.String(), "the worker's asynq server warned")
}

// startRelay runs `bunbox relay` as the relay's role and Redis user, with its reconciler every 50ms, and
// returns its metrics address and a function that stops it and checks that it exited 0 without a
// refusal or a warning.
func (b *grantsBundle) startRelay(t *testing.T) (addr string, stop func()) {
	t.Helper()
	addr = freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	env := b.env(t, "bunbox_relay", "bunbox_relay")
	go func() {
		done <- run(ctx, []string{"relay", "-metrics-addr", addr, "-reconcile-interval", "50ms"},
			getenvOf(t, env), &out, &out)
	}()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		require.Equal(t, 0, <-done, out.String())
		requireNoPrivilegeError(t, out.String())
	}
	t.Cleanup(stop)
	return addr, stop
}

// asynqLogger keeps an asynq server's logs, for the test to look for refusals in.
type asynqLogger struct{ syncBuffer }

func (l *asynqLogger) Debug(args ...any) {}
func (l *asynqLogger) Info(args ...any)  {}
func (l *asynqLogger) Warn(args ...any)  { _, _ = fmt.Fprintln(l, args...) }
func (l *asynqLogger) Error(args ...any) { _, _ = fmt.Fprintln(l, args...) }
func (l *asynqLogger) Fatal(args ...any) { _, _ = fmt.Fprintln(l, args...) }
