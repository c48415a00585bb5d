package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func randSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestNoSecretInOutput runs the shop's commands with passwords in DATABASE_URL and REDIS_URL, in every
// form, and checks that none reaches their errors or their logs.
func TestNoSecretInOutput(t *testing.T) {
	t.Parallel()

	const secret = "Sh0pS3cret"
	databaseURLs := []string{
		"postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable",
		"postgres://u:Pa%ZZ" + secret + "@127.0.0.1:1/db",
		"postgres://u:" + secret + "/x@127.0.0.1:1/db",
		"postgres://u@127.0.0.1:1/db?password=" + secret + "&sslmode=disable",
		"host=127.0.0.1 port=1 user=u password='" + secret + " x' sslmode=disable",
		"host=127.0.0.1 port=1 user=u password=" + secret + " sslmode=sometimes",
	}
	redisURLs := []string{
		"redis://:" + secret + "@127.0.0.1:1/0",
		"redis://:Pa%ZZ" + secret + "@127.0.0.1:1",
		"rediss://u:" + secret + "@127.0.0.1:1",
		"redis-sentinel://:" + secret + "@127.0.0.1:1?master=m&password=" + secret,
		"redis-cluster://u:" + secret + "@127.0.0.1:1,127.0.0.1:2",
	}
	check := func(t *testing.T, e env, cmd string) {
		t.Helper()
		var out bytes.Buffer
		var err error
		if cmd == "demo" {
			// A schema of its own: the demo drops and creates it.
			name := "shop_secret_test_" + randSuffix()
			cfg, perr := parseDemoFlags([]string{"-orders", "1", "-schema", name, "-queue", name}, &out)
			require.NoError(t, perr)
			err = runDemo(context.Background(), cfg, e, &out, &out)
		} else {
			err = serve(context.Background(), cmd, nil, e, &out)
		}
		require.Error(t, err)
		require.NotContains(t, err.Error()+out.String(), secret)
	}
	for i, dsn := range databaseURLs {
		for _, cmd := range []string{"relay", "worker", "demo"} {
			t.Run(fmt.Sprintf("DatabaseURL%d/%s", i, cmd), func(t *testing.T) {
				t.Parallel()
				check(t, testEnv(t, env{databaseURL: dsn, redisAddr: "127.0.0.1:1"}), cmd)
			})
		}
	}
	if testing.Short() {
		return // the Redis cases need a database to get that far
	}
	for i, u := range redisURLs {
		for _, cmd := range []string{"relay", "worker", "demo"} {
			t.Run(fmt.Sprintf("RedisURL%d/%s", i, cmd), func(t *testing.T) {
				t.Parallel()
				// serve migrates the shop's tables: in a schema of its own.
				dsn := outboxtest.DatabaseURL() + "&search_path=" + outboxtest.NewSchema(t)
				check(t, testEnv(t, env{databaseURL: dsn, redisURL: u}), cmd)
			})
		}
	}
}
