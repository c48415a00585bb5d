package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// databaseURLsWithSecret are DATABASE_URLs that each hold secret in a form users write, none of which
// opens a database.
func databaseURLsWithSecret(secret string) []string {
	return []string{
		"postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable",
		"postgres://u:Pa%ZZ" + secret + "@127.0.0.1:1/db",
		"postgres://u:" + secret + "/x@127.0.0.1:1/db",
		"postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=sometimes",
		"postgres://u@127.0.0.1:1/db?password=" + secret + "&sslmode=disable",
		"postgres://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent&password=" + secret,
		"host=127.0.0.1 port=1 user=u password=" + secret + " sslmode=disable",
		"host=127.0.0.1 port=1 user=u password='" + secret + " x' sslmode=disable",
		"host=127.0.0.1 port=1 user=u password='" + secret,
		"mysql://u:" + secret + "@127.0.0.1:1/db",
		// White space around the URL once made it a key=value list, printed unmasked.
		" postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable\n",
	}
}

// redisURLsWithSecret are REDIS_URLs that each hold secret, none of which reaches a Redis.
func redisURLsWithSecret(secret string) []string {
	return []string{
		"redis://:" + secret + "@127.0.0.1:1/0",
		"redis://:Pa%ZZ" + secret + "@127.0.0.1:1",
		"redis://u:" + secret + "/x@127.0.0.1:1",
		"rediss://u:" + secret + "@127.0.0.1:1",
		"redis://:" + secret + "@127.0.0.1:1/notadb",
		"redis-sentinel://:" + secret + "@127.0.0.1:1,127.0.0.1:2?master=m&password=" + secret,
		"redis-sentinel://:" + secret + "@127.0.0.1:1",
		"redis-cluster://u:" + secret + "@127.0.0.1:1,127.0.0.1:2",
		"redis-cluster://u:" + secret + "@127.0.0.1:1,,127.0.0.1:2",
		":" + secret + "@127.0.0.1:1",
		"redis://" + secret + "@127.0.0.1:1", // redis-cli reads a lone userinfo as the password
		"\trediss://:" + secret + "@127.0.0.1:1\n",
	}
}

// TestEnvWhiteSpace: white space around DATABASE_URL and REDIS_URL (a variable written with a trailing
// newline) is not part of them: the URL's host is used, with its sslmode, and a blank REDIS_URL does not
// hide OUTBOX_REDIS_URL.
func TestEnvWhiteSpace(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	schema := outboxtest.NewSchema(t)
	databaseURL := outboxtest.SchemaURL(t, schema)
	code, _, stderr := runCLI(t, map[string]string{"DATABASE_URL": " " + databaseURL + "\n"}, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = runCLI(t, map[string]string{"REDIS_ADDR": " " + outboxtest.RedisAddr() + "\n"}, "-database-url", "\t"+databaseURL+" ", "status")
	require.Equal(t, 0, code, stderr)

	// The URL's host and sslmode, not libpq's defaults (localhost, prefer): this server has no TLS.
	code, _, stderr = runCLI(t, map[string]string{"DATABASE_URL": " postgres://u:Wh1teSecret@127.0.0.1:1/db?sslmode=verify-full\n"}, "status")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "postgres://u:xxxxx@127.0.0.1:1/db?sslmode=verify-full")
	require.NotContains(t, stderr, "Wh1teSecret")

	code, _, stderr = runCLI(t, map[string]string{"DATABASE_URL": databaseURL, "REDIS_URL": "  \n", "OUTBOX_REDIS_URL": "redis://:Wh1teSecret@127.0.0.1:1\n"}, "reconcile")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "127.0.0.1:1", "OUTBOX_REDIS_URL is used")
	require.NotContains(t, stderr, "Wh1teSecret")
}

// TestNoSecretInOutput runs the CLI with passwords in every form in DATABASE_URL, -database-url and
// REDIS_URL, and checks that none reaches its output or its logs.
func TestNoSecretInOutput(t *testing.T) {
	t.Parallel()

	const secret = "Sup3rS3cret"
	for i, dsn := range databaseURLsWithSecret(secret) {
		for _, args := range [][]string{{"status"}, {"dead", "list"}, {"migrate", "status"}, {"reconcile"}, {"stream", "on"}, {"relay", "-metrics-addr", ""}} {
			t.Run(fmt.Sprintf("DatabaseURL%d/%s", i, args[0]), func(t *testing.T) {
				t.Parallel()
				code, stdout, stderr := runCLI(t, map[string]string{"DATABASE_URL": dsn}, args...)
				require.Equal(t, 1, code, stderr)
				require.NotContains(t, stdout+stderr, secret)
				require.Contains(t, stderr, "xxxxx", "the connection string is shown, redacted")
				// The flag says the same as the variable.
				code, stdout, stderr = runCLI(t, nil, append([]string{"-database-url", dsn}, args...)...)
				require.Equal(t, 1, code, stderr)
				require.NotContains(t, stdout+stderr, secret)
			})
		}
	}

	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{"DATABASE_URL": databaseURLsWithSecret(secret)[0], "REDIS_URL": redisURLsWithSecret(secret)[0]}
		for _, args := range [][]string{{"-h"}, {"help"}, {"relay", "-h"}, {"-nosuchflag"}, {"frobnicate"}} {
			_, stdout, stderr := runCLI(t, env, args...)
			require.NotContains(t, stdout+stderr, secret, args)
		}
	})

	if testing.Short() {
		return // the Redis cases need a database to get that far
	}
	env, _ := schemaEnv(t)
	databaseURL := env["DATABASE_URL"]
	for i, u := range redisURLsWithSecret(secret) {
		t.Run(fmt.Sprintf("RedisURL%d", i), func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"DATABASE_URL": databaseURL, "REDIS_URL": u}
			for _, args := range [][]string{{"relay", "-metrics-addr", "", "-reconcile-window", "10m", "-log-level", "debug"}, {"reconcile"}} {
				code, stdout, stderr := runCLI(t, env, args...)
				require.Equal(t, 1, code, stderr)
				require.NotContains(t, stdout+stderr, secret)
			}
		})
	}
	t.Run("WrongRedisPassword", func(t *testing.T) {
		t.Parallel()
		rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{Password: "the-right-one"})
		code, stdout, stderr := runCLI(t, map[string]string{"DATABASE_URL": databaseURL, "REDIS_URL": "redis://:" + secret + "@" + rd.Addr()},
			"relay", "-metrics-addr", "", "-log-level", "debug")
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "WRONGPASS")
		require.NotContains(t, stdout+stderr, secret)
	})
}

// TestRelayRedisURL runs `bunbox relay` against a password-protected Redis given by URL (in REDIS_URL,
// then in OUTBOX_REDIS_URL), with the reconciler on, and checks that it delivers an event and prints no
// password.
func TestRelayRedisURL(t *testing.T) {
	t.Parallel()
	for _, variable := range []string{"REDIS_URL", "OUTBOX_REDIS_URL"} {
		t.Run(variable, func(t *testing.T) {
			t.Parallel()
			testRelayRedisURL(t, variable)
		})
	}
}

func testRelayRedisURL(t *testing.T, variable string) {
	outboxtest.SkipShort(t)

	const password = "r3dis-Pa55"
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{Password: password})
	db, schema := outboxtest.Schema(t)
	ev, err := model.NewEvent("order.placed", map[string]int{"order_id": 7})
	require.NoError(t, err)
	_, err = db.NewInsert().Model(ev).Exec(context.Background())
	require.NoError(t, err)

	env := map[string]string{
		"DATABASE_URL": outboxtest.SchemaURL(t, schema),
		variable:       "redis://:" + password + "@" + rd.Addr() + "/3",
		"REDIS_ADDR":   "127.0.0.1:1", // the URL wins
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metricsAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	go func() {
		done <- run(ctx, []string{"relay", "-metrics-addr", metricsAddr, "-reconcile-window", "10m", "-log-level", "debug"},
			getenvOf(t, env), &stdout, &stderr)
	}()

	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: rd.Addr(), Password: password, DB: 3})
	defer ins.Close()
	outboxtest.WaitFor(t, 20*time.Second, "the event in Redis database 3", func() bool {
		info, err := ins.GetTaskInfo("default", ev.EventID.String())
		return err == nil && info.Type == "order.placed"
	})
	outboxtest.WaitFor(t, 20*time.Second, "the row marked published", func() bool {
		return outboxtest.CountDelivered(t, db, "") == 1
	})
	// The readiness probe reaches the same Redis, by the same URL.
	var ready string
	outboxtest.WaitFor(t, 20*time.Second, "/readyz answering 200", func() bool {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ready = string(b)
		return resp.StatusCode == http.StatusOK
	})
	require.NotContains(t, ready, password)
	cancel()
	require.Equal(t, 0, <-done, stderr.String())
	require.NotContains(t, stdout.String()+stderr.String(), password)
}

// passwordsWithDelimiters are passwords with the characters a driver may split a URL at, unescaped;
// passwordPieces are what a split of one can leave.
var passwordsWithDelimiters = []string{
	"Alpha7@Bravo7",
	"Alpha7:Bravo7@Charlie7",
	"Alpha7/Bravo7",
	"Alpha7?Bravo7",
	"Alpha7#Bravo7@Charlie7",
	"Alpha7@Bravo7:Charlie7/Delta7?Echo7#Foxtrot7",
}

var passwordPieces = []string{"Alpha7", "Bravo7", "Charlie7", "Delta7", "Echo7", "Foxtrot7"}

// connectingCommands are the CLI's commands that open the database (and, some, Redis), with arguments
// that get them that far.
var connectingCommands = [][]string{
	{"status"}, {"status", "-json"}, {"dead", "list"}, {"dead", "retry", "-all"}, {"dead", "purge", "-all"},
	{"relay", "-metrics-addr", ""}, {"reconcile"}, {"migrate", "status"}, {"migrate", "up"},
	{"migrate", "down", "-yes"}, {"stream", "status"}, {"stream", "on"}, {"stream", "off"},
	{"cancel", "0194b5a0-0000-7000-8000-000000000001"}, {"ui", "-addr", "127.0.0.1:0"},
}

// TestNoPieceOfThePasswordInOutput runs every command that connects, on both drivers, with passwords
// holding '@', ':', '/', '?' and '#' unescaped in DATABASE_URL and REDIS_URL, and checks that no piece of
// them reaches the output: pgx ends a URL's userinfo at the first '@' and quoted the rest of the
// password as a host it could not look up.
func TestNoPieceOfThePasswordInOutput(t *testing.T) {
	t.Parallel()

	for _, driver := range []string{"pgdriver", "pgx"} {
		for i, pw := range passwordsWithDelimiters {
			for j, dsn := range []string{
				"postgres://u:" + pw + "@127.0.0.1:1/db?sslmode=disable",
				"postgres://u:" + pw + "@127.0.0.1:1/db",
				"postgresql://u:" + pw + "@nohost.invalid/db?sslmode=disable",
				"host=127.0.0.1 port=1 user=u sslmode=disable password='" + pw + "'",
			} {
				t.Run(fmt.Sprintf("%s/%d/%d", driver, i, j), func(t *testing.T) {
					t.Parallel()
					for _, args := range connectingCommands {
						env := map[string]string{"DATABASE_DRIVER": driver, "DATABASE_URL": dsn, "REDIS_URL": "redis://:" + pw + "@127.0.0.1:1/0"}
						code, stdout, stderr := runCLI(t, env, args...)
						require.Equal(t, 1, code, "%v: %s", args, stderr)
						for _, p := range passwordPieces {
							require.NotContains(t, stdout+stderr, p, "%v with %s", args, dsn)
						}
					}
				})
			}
		}
	}

	if testing.Short() {
		return // the Redis cases need a database to get that far
	}
	env, _ := schemaEnv(t)
	databaseURL := env["DATABASE_URL"]
	for i, pw := range passwordsWithDelimiters {
		for j, u := range []string{
			"redis://:" + pw + "@127.0.0.1:1/0",
			"redis://u:" + pw + "@127.0.0.1:1",
			"redis-sentinel://:" + pw + "@127.0.0.1:1,127.0.0.1:2?master=m",
			"redis-cluster://u:" + pw + "@127.0.0.1:1,127.0.0.1:2",
		} {
			t.Run(fmt.Sprintf("Redis/%d/%d", i, j), func(t *testing.T) {
				t.Parallel()
				for _, driver := range []string{"pgdriver", "pgx"} {
					env := map[string]string{"DATABASE_DRIVER": driver, "DATABASE_URL": databaseURL, "REDIS_URL": u}
					for _, args := range [][]string{{"relay", "-metrics-addr", "", "-reconcile-window", "10m", "-log-level", "debug"}, {"reconcile"}, {"status"}, {"status", "-json"}} {
						_, stdout, stderr := runCLI(t, env, args...)
						for _, p := range passwordPieces {
							require.NotContains(t, stdout+stderr, p, "%v with %s", args, u)
						}
					}
				}
			})
		}
	}
}
