package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql opens connections in the background for pools the tests close at cleanup.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		// go-redis pools reap idle connections on a timer goroutine that ends shortly after Close.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}

// testEnv is e with the test kit's driver (BUNBOX_TEST_DRIVER) as DATABASE_DRIVER.
func testEnv(t *testing.T, e env) env {
	t.Helper()
	driver, err := outboxtest.Driver()
	require.NoError(t, err)
	e.databaseDriver = driver
	return e
}

func TestRunUsage(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"NoCommand", nil, 2, "usage: shop"},
		{"UnknownCommand", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"Help", []string{"help"}, 0, "usage: shop"},
		{"DemoHelp", []string{"demo", "-h"}, 0, "-orders"},
		{"DemoBadFlag", []string{"demo", "-orders", "zero"}, 2, "invalid value"},
		{"DemoBadOrders", []string{"demo", "-orders", "0"}, 2, "-orders must be between"},
		{"DemoBadSchema", []string{"demo", "-schema", "Robert'); DROP"}, 2, "-schema must be"},
		{"DemoExtraArgs", []string{"demo", "now"}, 2, "unexpected arguments"},
		{"APIExtraArgs", []string{"api", "now"}, 2, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			code := run(context.Background(), tt.args, &out, &out)
			require.Equal(t, tt.wantCode, code, out.String())
			require.Contains(t, out.String(), tt.wantOut)
		})
	}
}

func TestServeBadDatabaseDriver(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := serve(context.Background(), "api", nil, env{databaseURL: "postgres://u:secret@127.0.0.1:1/db", databaseDriver: "mysql", redisAddr: "127.0.0.1:1"}, &out)
	require.EqualError(t, err, `DATABASE_DRIVER is "mysql": want "pgdriver" or "pgx"`)
}

func TestServeBadDatabaseURL(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := serve(context.Background(), "api", nil, testEnv(t, env{databaseURL: "postgres://%zz", redisAddr: "127.0.0.1:1"}), &out)
	require.ErrorContains(t, err, "invalid PostgreSQL URL")
}

func TestDemo(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)

	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "shop_demo_test_" + hex.EncodeToString(b[:])
	cfg, err := parseDemoFlags([]string{"-orders", "200", "-producers", "4", "-rate", "0", "-schema", name, "-queue", name}, &bytes.Buffer{})
	require.NoError(t, err)

	var out bytes.Buffer
	err = runDemo(context.Background(), cfg, testEnv(t, env{databaseURL: outboxtest.DatabaseURL(), redisAddr: outboxtest.RedisAddr()}), &out, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "orders committed                180")
	require.Contains(t, out.String(), "orders rolled back               20")
	require.Contains(t, out.String(), "OK: every committed order was confirmed")
	require.Zero(t, outboxtest.Count(t, outboxtest.Open(t, nil), "information_schema.schemata", "schema_name = ?", name),
		"the demo drops its schema")
}
