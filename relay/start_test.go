package relay_test

import (
	"database/sql"
	"net"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/relay"
)

// Bad settings at start give a clear error from relay.New and relay.NewReconciler, never a panic and
// never a hang.

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestStartWithBrokenSettings(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	db, _ := outboxtest.Schema(t)
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}

	t.Run("DatabaseUnreachable", func(t *testing.T) {
		t.Parallel()
		sqldb := sql.OpenDB(pgdriver.NewConnector(
			pgdriver.WithDSN("postgres://postgres@"+closedPort(t)+"/postgres?sslmode=disable"),
			pgdriver.WithTimeout(2*time.Second)))
		broken := bun.NewDB(sqldb, pgdialect.New())
		t.Cleanup(func() { _ = broken.Close() })
		start := time.Now()
		_, err := relay.New(broken, redis, relay.Config{})
		require.ErrorContains(t, err, "relay: PostgreSQL")
		require.ErrorContains(t, err, "connection refused")
		_, err = relay.NewReconciler(broken, redis, relay.ReconcilerConfig{})
		require.ErrorContains(t, err, "relay: PostgreSQL")
		require.Less(t, time.Since(start), 20*time.Second)
	})
	t.Run("RedisAddressMalformed", func(t *testing.T) {
		t.Parallel()
		for _, addr := range []string{"not an address", "127.0.0.1", ":::"} {
			opt := asynq.RedisClientOpt{Addr: addr, DialTimeout: time.Second}
			_, err := relay.New(db, opt, relay.Config{})
			require.ErrorContains(t, err, "Redis does not answer", "addr %q", addr)
			_, err = relay.NewReconciler(db, opt, relay.ReconcilerConfig{})
			require.ErrorContains(t, err, "Redis does not answer", "addr %q", addr)
		}
	})
	t.Run("RedisURLMalformed", func(t *testing.T) {
		t.Parallel()
		_, err := asynq.ParseRedisURI("redis://:bad port")
		require.Error(t, err) // what a CLI does with a URL before it gets to relay.New
	})
	t.Run("RedisNobodyListening", func(t *testing.T) {
		t.Parallel()
		opt := asynq.RedisClientOpt{Addr: closedPort(t), DialTimeout: time.Second}
		_, err := relay.New(db, opt, relay.Config{})
		require.ErrorContains(t, err, "Redis does not answer")
		require.ErrorContains(t, err, "connection refused")
		_, err = relay.NewReconciler(db, opt, relay.ReconcilerConfig{})
		require.ErrorContains(t, err, "connection refused")
	})
}
