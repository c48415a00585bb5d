package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/relay/relaymetrics"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql opens connections in the background for pools the tests close at cleanup.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		// go-redis retries a failed dial once a second in the background until the dial succeeds or the pool is
		// closed; the probes test stops its Redis, so one may still be asleep when the tests end.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}

// runCLI runs the command line with the given environment and returns its exit code and output. Without
// DATABASE_DRIVER in env, the CLI opens its database with the test kit's driver (BUNBOX_TEST_DRIVER).
func runCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, getenvOf(t, env), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// getenvOf is the CLI's environment env, with DATABASE_DRIVER the test kit's driver (BUNBOX_TEST_DRIVER)
// unless env sets it: the commands a test runs open their database as its own connections do.
func getenvOf(t *testing.T, env map[string]string) func(string) string {
	t.Helper()
	driver, err := outboxtest.Driver()
	require.NoError(t, err)
	return func(k string) string {
		if v, ok := env[k]; ok || k != "DATABASE_DRIVER" {
			return v
		}
		return driver
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"NoCommand", nil, nil, 2, "", "no command"},
		{"Help", nil, []string{"help"}, 0, "usage: bunbox", ""},
		{"HelpFlag", nil, []string{"-h"}, 0, "", "usage: bunbox"},
		{"UnknownCommand", nil, []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"UnknownFlag", nil, []string{"-verbose", "status"}, 2, "", "flag provided but not defined"},
		{"UnknownDriver", map[string]string{"DATABASE_DRIVER": "mysql"}, []string{"status"}, 2, "", `-database-driver (DATABASE_DRIVER) is "mysql": want "pgdriver" or "pgx"`},
		{"UnknownDriverFlag", nil, []string{"-database-driver", "lib/pq", "status"}, 2, "", `is "lib/pq"`},
		// Only pgx refuses pgdriver's read_timeout: the driver chosen is the one that opens the database.
		{"DriverPgx", map[string]string{"DATABASE_DRIVER": "pgx", "DATABASE_URL": "postgres://u@127.0.0.1:1/db?read_timeout=5s"}, []string{"status"}, 1, "", "read_timeout is pgdriver's"},
		{"DriverPgxFlag", map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:1/db?read_timeout=5s"}, []string{"-database-driver", "pgx", "status"}, 1, "", "read_timeout is pgdriver's"},
		{"DriverPgdriverFlag", map[string]string{"DATABASE_DRIVER": "pgx", "DATABASE_URL": "postgres://u@127.0.0.1:1/db?read_timeout=5s&sslmode=disable"}, []string{"-database-driver", "pgdriver", "status"}, 1, "", "cannot connect to PostgreSQL"},
		{"MigrateNothing", nil, []string{"migrate"}, 2, "", "migrate needs up, down or status"},
		{"MigrateSideways", nil, []string{"migrate", "sideways"}, 2, "", `unknown migrate command "sideways"`},
		{"MigrateDownUnconfirmed", nil, []string{"migrate", "down"}, 2, "", "add -yes to confirm"},
		{"MigrateUpExtra", nil, []string{"migrate", "up", "now"}, 2, "", "takes no arguments"},
		{"Schema", nil, []string{"schema"}, 0, "CREATE TABLE IF NOT EXISTS outbox_events", ""},
		{"DeadNothing", nil, []string{"dead"}, 2, "", "dead needs list, retry or purge"},
		{"DeadRetryNoIDs", nil, []string{"dead", "retry"}, 2, "", "at least one event id"},
		{"DeadRetryBadID", nil, []string{"dead", "retry", "42"}, 2, "", `"42" is not an event id`},
		{"DeadListBadLimit", nil, []string{"dead", "list", "-limit", "0"}, 2, "", "-limit must be positive"},
		{"RelayBadLogLevel", nil, []string{"relay", "-log-level", "loud"}, 2, "", "-log-level"},
		{"NoDatabaseURL", nil, []string{"status"}, 1, "", "set DATABASE_URL"},
		{"BrokenDatabaseURL", map[string]string{"DATABASE_URL": "postgres://%zz"}, []string{"status"}, 1, "", "invalid PostgreSQL URL"},
		{"WrongScheme", map[string]string{"DATABASE_URL": "mysql://root@localhost/db"}, []string{"status"}, 1, "", "want postgres://"},
		{"UnreachableDatabase", map[string]string{"DATABASE_URL": "postgres://u:secret@127.0.0.1:1/db?sslmode=disable"}, []string{"status"}, 1, "", "cannot connect to PostgreSQL at postgres://u:xxxxx@127.0.0.1:1/db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, tt.env, tt.args...)
			require.Equal(t, tt.wantCode, code, "stdout: %s\nstderr: %s", stdout, stderr)
			require.Contains(t, stdout, tt.wantStdout)
			require.Contains(t, stderr, tt.wantStderr)
			require.NotContains(t, stderr, "secret", "the password is redacted")
		})
	}
}

// TestRunCLIFollowsTheTestDriver checks that runCLI opens the database with BUNBOX_TEST_DRIVER's driver:
// only pgx refuses pgdriver's read_timeout.
func TestRunCLIFollowsTheTestDriver(t *testing.T) {
	t.Parallel()
	driver, err := outboxtest.Driver()
	require.NoError(t, err)
	want := map[string]string{outboxtest.DriverPgdriver: "cannot connect to PostgreSQL", outboxtest.DriverPgx: "read_timeout is pgdriver's"}[driver]
	code, _, stderr := runCLI(t, map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:1/db?read_timeout=5s&sslmode=disable"}, "status")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, want)
}

func TestParseEventIDs(t *testing.T) {
	t.Parallel()

	id := uuid.Must(uuid.NewV7())
	ids, err := parseEventIDs([]string{id.String(), strings.ToUpper(id.String())})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{id, id}, ids)

	_, err = parseEventIDs(nil)
	require.ErrorContains(t, err, "at least one")
	_, err = parseEventIDs([]string{id.String(), "nope"})
	require.ErrorContains(t, err, `"nope" is not an event id`)
}

func TestOneLine(t *testing.T) {
	t.Parallel()

	tests := []struct{ in, want string }{
		{"", ""},
		{"short", "short"},
		{"a\nb\tc", "a b c"},
		{"abcdefghij", "abcdefghij"},
		{"abcdefghijk", "abcdefghi…"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, oneLine(tt.in, 10), "in %q", tt.in)
	}
}

func TestFormatAge(t *testing.T) {
	t.Parallel()

	require.Equal(t, "-", formatAge(0))
	require.Equal(t, "250ms", formatAge(250*time.Millisecond+300*time.Microsecond))
	require.Equal(t, "1m30s", formatAge(90*time.Second+400*time.Millisecond))
}

// nopEnqueuer stands in for Redis where the relay must exist but never runs.
type nopEnqueuer struct{}

func (nopEnqueuer) EnqueueContext(context.Context, *asynq.Task, ...asynq.Option) (*asynq.TaskInfo, error) {
	return &asynq.TaskInfo{}, nil
}

func TestAgainstDatabase(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)

	schema := outboxtest.NewSchema(t)
	env := map[string]string{"DATABASE_URL": outboxtest.SchemaURL(t, schema), "REDIS_ADDR": outboxtest.RedisAddr()}

	code, _, stderr := runCLI(t, env, "status")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "run `bunbox migrate up`")

	code, stdout, stderr := runCLI(t, env, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "up to date")

	code, stdout, stderr = runCLI(t, env, "migrate", "status")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "20261129000001")
	require.NotContains(t, stdout, "\tno\n")

	// Three pending events (one a minute old), two published, one dead.
	db := outboxtest.Open(t, map[string]any{"search_path": schema})
	ctx := context.Background()
	var dead *model.Event
	for i := range 6 {
		ev, err := model.NewEvent("order.placed", map[string]int{"order_id": i})
		require.NoError(t, err)
		_, err = db.NewInsert().Model(ev).Exec(ctx)
		require.NoError(t, err)
		switch i {
		case 0:
			_, err = db.NewUpdate().Model(ev).Set("created_at = now() - interval '1 minute'").WherePK().Exec(ctx)
		case 3, 4:
			_, err = db.NewUpdate().Model(ev).Set("published_at = now()").WherePK().Exec(ctx)
		case 5:
			dead = ev
			_, err = db.NewUpdate().Model(ev).Set("published_at = NULL, dead_at = now(), attempts = 10, last_error = 'redis: connection refused'").WherePK().Exec(ctx)
		}
		require.NoError(t, err)
	}

	// One published event waits in asynq's scheduled set (model.WithProcessIn).
	_, err := db.ExecContext(ctx, "UPDATE outbox_events SET process_at = now() + interval '1 hour' WHERE id = (SELECT max(id) FROM outbox_events WHERE published_at IS NOT NULL AND published_at <> 'infinity')")
	require.NoError(t, err)

	code, stdout, stderr = runCLI(t, env, "status", "-json")
	require.Equal(t, 0, code, stderr)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Equal(t, int64(3), rep.Pending)
	require.Equal(t, int64(2), rep.Published)
	require.Equal(t, int64(1), rep.Dead)
	require.Equal(t, int64(1), rep.Scheduled)
	require.GreaterOrEqual(t, rep.OldestPendingAge, 59.0)

	code, stdout, stderr = runCLI(t, env, "status")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `pending\s+3\n`, stdout)
	require.Regexp(t, `dead\s+1\n`, stdout)
	require.Regexp(t, `scheduled\s+1\n`, stdout)

	code, stdout, stderr = runCLI(t, env, "dead", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, dead.EventID.String())
	require.Contains(t, stdout, "redis: connection refused")

	unknown := uuid.NewString()
	code, stdout, stderr = runCLI(t, env, "dead", "retry", dead.EventID.String(), unknown)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stdout, "1 of 2 events put back in line")
	require.Contains(t, stderr, unknown+": not in the outbox")
	require.Zero(t, outboxtest.Count(t, db, "outbox_events", "dead_at IS NOT NULL"))

	code, stdout, _ = runCLI(t, env, "dead", "list")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "no dead events")

	t.Run("Metrics", func(t *testing.T) {
		r, err := relay.New(db, nil, relay.Config{Enqueuer: nopEnqueuer{}})
		require.NoError(t, err)
		m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{DB: db})
		require.NoError(t, err)
		m.SetRelay(r)
		srv := httptest.NewServer(metricsHandler(m))
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, string(body), "bunbox_outbox_backlog 4\n", "the dead event is pending again")
		require.Contains(t, string(body), "bunbox_outbox_up 1\n")
		require.Contains(t, string(body), "bunbox_relay_published_total 0\n")
	})

	t.Run("Relay", func(t *testing.T) {
		// The events above are for the "default" queue of the shared Redis: keep them out of it.
		_, err := db.NewDelete().Table("outbox_events").Where("true").Exec(ctx)
		require.NoError(t, err)
		renv := map[string]string{"DATABASE_URL": env["DATABASE_URL"], "REDIS_ADDR": outboxtest.RedisAddr()}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"relay", "-metrics-addr", addr, "-reconcile-window", "10m"}, getenvOf(t, renv), &stdout, &stderr)
		}()
		var body string
		outboxtest.WaitFor(t, 10*time.Second, "the relay's /metrics", func() bool {
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
		require.Contains(t, body, "bunbox_outbox_backlog 0\n")
		cancel() // what SIGINT does
		require.Equal(t, 0, <-done, stderr.String())
		require.Contains(t, stderr.String(), "bunbox relay stopped")

		renv["REDIS_ADDR"] = "127.0.0.1:1"
		code, _, errOut := runCLI(t, renv, "relay", "-metrics-addr", "")
		require.Equal(t, 1, code)
		require.Contains(t, errOut, "Redis at 127.0.0.1:1")
	})

	code, stdout, stderr = runCLI(t, env, "migrate", "down", "-yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "rolled back")
	var exists bool
	require.NoError(t, db.NewRaw("SELECT to_regclass('outbox_events') IS NOT NULL").Scan(ctx, &exists))
	require.False(t, exists)
}
