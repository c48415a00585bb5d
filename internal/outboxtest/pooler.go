package outboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
)

// The pooler pass. `make test/pooler` runs the bunx, relay and migrate tests a second time with every
// connection of the kit going through PgBouncer in transaction mode (scripts/devservices.sh starts one with
// default_pool_size = 2, at TEST_POOLER_URL), as teams run bunbox behind one.
//
// PgBouncer before 1.21 does not pass the search_path startup parameter, and a session SET through a
// transaction pooler lands on whichever server connection serves that statement, so per-test schemas cannot
// work through it. In the pooler pass NewSchema creates a fresh DATABASE instead (over the direct
// TEST_DATABASE_URL) and Open, given that name as search_path, connects to that database through the pooler:
// PgBouncer's `* =` entry routes any database name to the database of that name. Tests written for schemas
// run unchanged; each test database has a pool of its own in PgBouncer, of default_pool_size server
// connections, and is dropped (WITH (FORCE)) when the test ends.
//
// With pgx, the pooler pass sets default_query_exec_mode=simple_protocol (unless TEST_POOLER_URL names
// another mode): what pgx users behind PgBouncer before 1.21 set, since pgx's default statement cache
// names statements per client connection. Tests that cannot work through a transaction pooler by nature
// (a session advisory lock, a server restart, LISTEN on a pooled connection) call SkipPooled with the reason.

// PoolerEnv is the environment variable that selects the pooler pass: "1" routes the kit's connections
// through TEST_POOLER_URL.
const PoolerEnv = "BUNBOX_TEST_POOLER"

// PoolerURL is TEST_POOLER_URL: PgBouncer in transaction mode in front of the test server, or "" when the
// services run without one.
func PoolerURL() string { return os.Getenv("TEST_POOLER_URL") }

// Pooled reports whether this is the pooler pass (BUNBOX_TEST_POOLER=1).
func Pooled() bool { return os.Getenv(PoolerEnv) == "1" }

// SkipPooled skips the test in the pooler pass, saying why it cannot work through a transaction pooler.
func SkipPooled(tb testing.TB, why string) {
	tb.Helper()
	if Pooled() {
		tb.Skipf("skipped in the pooler pass (%s=1): %s", PoolerEnv, why)
	}
}

// RequirePooler returns TEST_POOLER_URL for tests that always go through the pooler; it skips under -short
// and fails when the services run without PgBouncer.
func RequirePooler(tb testing.TB) string {
	tb.Helper()
	SkipShort(tb)
	u := PoolerURL()
	if u == "" {
		tb.Fatalf("TEST_POOLER_URL is not set: run the tests with `make test`, whose services include PgBouncer " +
			"(scripts/devservices.sh up; eval \"$(scripts/devservices.sh env)\")")
	}
	return u
}

// OpenPooled connects to database dbname through the pooler (RequirePooler), with the driver of
// BUNBOX_TEST_DRIVER (pgx in simple protocol, see the package's pooler notes), and closes the pool when the
// test ends. params may only hold what PgBouncer tracks per client (application_name).
func OpenPooled(tb testing.TB, dbname string, params map[string]any) *bun.DB {
	tb.Helper()
	u, err := pooledURL(RequirePooler(tb), dbname)
	if err != nil {
		tb.Fatalf("TEST_POOLER_URL: %v", err)
	}
	for k := range params {
		if k != "application_name" {
			tb.Fatalf("connection parameter %q cannot pass a transaction pooler: a session SET lands on a "+
				"server connection other clients share", k)
		}
	}
	return open(tb, u, params, "run the tests with `make test`, which starts PgBouncer")
}

// NewDatabase creates an empty database with a random name over the direct connection, with an empty schema
// of the same name first on its search_path, and drops it (with FORCE: the pooler keeps server connections
// to it) when the test ends.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	admin := OpenDirect(tb, nil)
	name := randomName()
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database: %v", err)
	}
	pooledDBs.Store(name, true)
	tb.Cleanup(func() {
		pooledDBs.Delete(name)
		// PgBouncer 1.18 crashes (server_proto: server in bad state: 11) when a server connection that a
		// cancel request is under way for is closed (by PAUSE, or DROP DATABASE ... WITH (FORCE)): let the
		// pool settle and PgBouncer close its connections first.
		resume := pausePooler(tb, name)
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Logf("drop database %s: %v", name, err)
		}
		resume()
	})
	// A schema of the same name, first on the database's search_path (set at login, so also on the pooler's
	// server connections): tests that name the schema in SQL (name.outbox_events) work unchanged.
	if _, err := admin.ExecContext(ctx, "ALTER DATABASE "+name+" SET search_path = "+name+", public"); err != nil {
		tb.Fatalf("set the search_path of database %s: %v", name, err)
	}
	in := OpenDirectDB(tb, name)
	if _, err := in.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("create schema %s in database %s: %v", name, name, err)
	}
	_ = in.Close()
	return name
}

// pooledDBs are the databases NewSchema made in the pooler pass, which Open accepts as a search_path.
var pooledDBs sync.Map

// pooledParams splits the parameters Open was given in the pooler pass into the database to connect to
// (a search_path that NewSchema made) and the rest.
func pooledParams(params map[string]any) (dbname string, rest map[string]any, err error) {
	rest = make(map[string]any, len(params))
	for k, v := range params {
		if k == "search_path" {
			name := fmt.Sprint(v)
			if _, ok := pooledDBs.Load(name); !ok {
				return "", nil, fmt.Errorf("search_path %q is not a database NewSchema made: PgBouncer does not pass "+
					"search_path (see the pooler notes of package outboxtest)", name)
			}
			dbname = name
			continue
		}
		rest[k] = v
	}
	return dbname, rest, nil
}

// pooledURL is the pooler's URL with dbname as its database ("" keeps the URL's), and pgx's simple protocol
// when the URL names no query mode.
func pooledURL(base, dbname string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("parse: %w", err)
	}
	if dbname != "" {
		u.Path = "/" + dbname
	}
	if d, _ := Driver(); d == DriverPgx {
		q := u.Query()
		if q.Get("default_query_exec_mode") == "" {
			q.Set("default_query_exec_mode", "simple_protocol")
		}
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// randomName is a fresh name for a test schema or database.
func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "bunbox_test_" + strings.ToLower(hex.EncodeToString(b[:]))
}

// OpenDirectDB connects to database dbname of the test server directly (TEST_DATABASE_URL with another
// database), also in the pooler pass, and closes the pool when the test ends.
func OpenDirectDB(tb testing.TB, dbname string) *bun.DB {
	tb.Helper()
	SkipShort(tb)
	u, err := url.Parse(DatabaseURL())
	if err != nil {
		tb.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + dbname
	return open(tb, u.String(), nil, "run the tests with `make test`, which starts it")
}

// pausePooler waits until PgBouncer's pool of database name has no client, query or cancel request left,
// then makes it close its server connections to it (PAUSE on its admin console) and returns a func that
// resumes it. Without a pooler, or when the
// admin console does not answer within 30 s, it does nothing (logged).
func pausePooler(tb testing.TB, name string) (resume func()) {
	tb.Helper()
	resume = func() {}
	if PoolerURL() == "" {
		return resume
	}
	u, err := url.Parse(PoolerURL())
	if err != nil {
		return resume
	}
	u.Path = "/pgbouncer"
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol") // the admin console speaks the simple protocol only
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return resume
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		tb.Logf("PgBouncer's admin console: %v", err)
		return resume
	}
	// Wait for the pool of name to settle: no client, no query and no cancel request in flight.
	for busy := true; busy; {
		busy = false
		rows, err := conn.Query(ctx, "SHOW POOLS")
		if err != nil {
			tb.Logf("PgBouncer SHOW POOLS: %v", err)
			break
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				break
			}
			row := make(map[string]string, len(vals))
			for i, f := range rows.FieldDescriptions() {
				row[f.Name] = fmt.Sprint(vals[i])
			}
			if row["database"] != name {
				continue
			}
			for _, col := range []string{"cl_active", "cl_waiting", "cl_active_cancel_req", "cl_waiting_cancel_req",
				"sv_active", "sv_active_cancel", "sv_being_canceled", "sv_login"} {
				if v, ok := row[col]; ok && v != "0" {
					busy = true
				}
			}
		}
		rows.Close()
		if busy {
			select {
			case <-ctx.Done():
				tb.Logf("PgBouncer's pool of %s did not settle within 30s", name)
				busy = false
			case <-time.After(20 * time.Millisecond): // a poll step of the admin console
			}
		}
	}
	if _, err := conn.Exec(ctx, "PAUSE "+name); err != nil {
		tb.Logf("PgBouncer PAUSE %s: %v", name, err)
		_ = conn.Close(context.Background())
		return resume
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = conn.Exec(rctx, "RESUME "+name)
		_ = conn.Close(rctx)
	}
}

// SchemaURL is the connection string a process of its own (the CLI, a relay in a child process) uses for
// name, a schema of NewSchema: TEST_DATABASE_URL with search_path=name, or, in the pooler pass, where
// NewSchema made a database, the pooler's URL of that database (whose search_path leads with name).
func SchemaURL(tb testing.TB, name string) string {
	tb.Helper()
	if Pooled() {
		u, err := pooledURL(RequirePooler(tb), name)
		if err != nil {
			tb.Fatalf("TEST_POOLER_URL: %v", err)
		}
		return u
	}
	sep := "?"
	if strings.Contains(DatabaseURL(), "?") {
		sep = "&"
	}
	return DatabaseURL() + sep + "search_path=" + name
}
