// Package outboxtest is bunbox's test kit: connections to the real PostgreSQL and Redis servers that
// `make test` starts, a fresh migrated schema per test, and waiting on conditions with a deadline.
//
// Tests that need a server skip under -short; otherwise a missing server fails the test with a message
// that says to run `make test`.
package outboxtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/bunbox/bunbox/model"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable"
	defaultRedisAddr   = "127.0.0.1:56379"
)

// DatabaseURL is TEST_DATABASE_URL, or the address scripts/devservices.sh uses by default.
func DatabaseURL() string { return cmp.Or(os.Getenv("TEST_DATABASE_URL"), defaultDatabaseURL) }

// RedisAddr is TEST_REDIS_ADDR, or the address scripts/devservices.sh uses by default.
func RedisAddr() string { return cmp.Or(os.Getenv("TEST_REDIS_ADDR"), defaultRedisAddr) }

// SkipShort skips the test under -short: it needs a server.
func SkipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs PostgreSQL/Redis; skipped with -short")
	}
}

// Open connects to the test database with the given extra connection parameters, checks that the server
// answers, and closes the pool when the test ends. In the pooler pass (Pooled) it connects through
// PgBouncer instead, and a search_path that NewSchema returned selects the database NewSchema made.
func Open(tb testing.TB, params map[string]any) *bun.DB {
	tb.Helper()
	SkipShort(tb)
	if Pooled() {
		dbname, rest, err := pooledParams(params)
		if err != nil {
			tb.Fatalf("outboxtest.Open in the pooler pass: %v", err)
		}
		return OpenPooled(tb, dbname, rest)
	}
	return OpenDirect(tb, params)
}

// OpenDirect is Open on the direct TEST_DATABASE_URL, also in the pooler pass.
func OpenDirect(tb testing.TB, params map[string]any) *bun.DB {
	tb.Helper()
	SkipShort(tb)
	return open(tb, DatabaseURL(), params, "run the tests with `make test`, which starts it")
}

// OpenURL connects to the PostgreSQL server at url, checks that it answers, and closes the pool when the
// test ends.
func OpenURL(tb testing.TB, url string, params map[string]any) *bun.DB {
	tb.Helper()
	return open(tb, url, params, "")
}

func open(tb testing.TB, url string, params map[string]any, hint string) *bun.DB {
	tb.Helper()
	sqldb, err := OpenSQL(url, params)
	if err != nil {
		tb.Fatalf("open PostgreSQL: %v", err)
	}
	sqldb.SetMaxOpenConns(20)
	sqldb.SetMaxIdleConns(20) // no churn: database/sql keeps only 2 idle connections by default
	db := bun.NewDB(sqldb, pgdialect.New())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		if hint != "" {
			tb.Fatalf("PostgreSQL at %s does not answer (%v): %s", url, err, hint)
		}
		tb.Fatalf("PostgreSQL at %s does not answer: %v", url, err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// Schema creates a fresh schema, migrates it with bunbox's migrations, and returns a pool whose
// connections work in it (in the pooler pass: a fresh database, through PgBouncer; see NewSchema). The
// schema is dropped when the test ends. Use it where rows must be committed
// (the relay, SKIP LOCKED across connections); for everything else TxDB is cheaper.
func Schema(tb testing.TB) (*bun.DB, string) {
	tb.Helper()
	name := NewSchema(tb)
	db := Open(tb, map[string]any{"search_path": name})
	if err := migrateUp(context.Background(), db, model.Location{}); err != nil {
		tb.Fatalf("migrate schema %s: %v", name, err)
	}
	return db, name
}

// NewSchema creates an empty schema with a random name and drops it when the test ends. In the pooler pass
// it creates a database of that name instead (NewDatabase), which Open selects when given the name as
// search_path.
func NewSchema(tb testing.TB) string {
	tb.Helper()
	if Pooled() {
		return NewDatabase(tb)
	}
	admin := Open(tb, nil)
	name := randomName()
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			tb.Logf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// TxDB returns a transaction in a migrated schema of its own, rolled back when the test ends.
func TxDB(tb testing.TB) bun.Tx {
	tb.Helper()
	db, _ := Schema(tb)
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		tb.Fatalf("begin: %v", err)
	}
	tb.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// WaitFor polls cond until it is true, failing the test when the deadline passes first. It is how tests
// wait for something to happen: never with a fixed sleep.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // a poll step, not a wait for an event
	}
}

// Logger returns a slog.Logger that writes to the test's log.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// Count returns the number of rows of table that match where.
func Count(tb testing.TB, db bun.IDB, table, where string, args ...any) int64 {
	tb.Helper()
	q := db.NewSelect().Table(table)
	if where != "" {
		q = q.Where(where, args...)
	}
	n, err := q.Count(context.Background())
	if err != nil {
		tb.Fatalf("count %s where %s: %v", table, where, err)
	}
	return n
}

// RandomName returns prefix followed by 12 random hex digits: a queue or key name no other test uses.
func RandomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
