package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// env holds the services' addresses and what the run made in them, to drop at the end.
type env struct {
	dbURL string
	redis asynq.RedisClientOpt
	admin *bun.DB
	ins   *asynq.Inspector
	meter *meter
	cur   *probe // the drain arm being measured, nil outside the drain part

	mu       sync.Mutex
	failures []string // what must fail the run once every part has printed its figures
	schemas  []string
	queues   []string
	closers  []func()
}

func newEnv(ctx context.Context) (*env, error) {
	url := os.Getenv("TEST_DATABASE_URL")
	addr := os.Getenv("TEST_REDIS_ADDR")
	if url == "" || addr == "" {
		return nil, errors.New(`TEST_DATABASE_URL and TEST_REDIS_ADDR must be set: eval "$(scripts/devservices.sh env)" (or run make bench)`)
	}
	e := &env{dbURL: url, redis: asynq.RedisClientOpt{Addr: addr, PoolSize: 64}}
	e.admin = openBun(url, nil, 4)
	if err := e.admin.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("PostgreSQL does not answer: %w", err)
	}
	e.ins = asynq.NewInspector(e.redis)
	e.meter = newMeter(ctx, e.admin, addr)
	return e, nil
}

func openBun(url string, params map[string]any, conns int) *bun.DB {
	// The growth part's fills and VACUUMs run longer than pgdriver's default 10 s read timeout.
	opts := []pgdriver.Option{pgdriver.WithDSN(url), pgdriver.WithReadTimeout(10 * time.Minute)}
	if len(params) > 0 {
		opts = append(opts, pgdriver.WithConnParams(params))
	}
	sqldb := sql.OpenDB(pgdriver.NewConnector(opts...))
	sqldb.SetMaxOpenConns(conns)
	sqldb.SetMaxIdleConns(conns)
	return bun.NewDB(sqldb, pgdialect.New())
}

// schema creates a schema of the run's own and returns a database whose search_path is it, with conns
// connections; migrated applies bunbox's migrations to it.
func (e *env) schema(ctx context.Context, conns int, migrated bool) (*bun.DB, string, error) {
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := "bunbench_" + hex.EncodeToString(b[:])
	if _, err := e.admin.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
		return nil, "", err
	}
	e.mu.Lock()
	e.schemas = append(e.schemas, name)
	e.mu.Unlock()
	db := openBun(e.dbURL, map[string]any{"search_path": name}, conns)
	e.onClose(func() { _ = db.Close() })
	if migrated {
		if err := bunboxmigrate.Up(ctx, db); err != nil {
			return nil, "", fmt.Errorf("migrate %s: %w", name, err)
		}
	}
	return db, name, nil
}

// schemaPgx is schema for the peers that need pgx under database/sql: bun over pgx's stdlib driver (lib/pq's
// encoding of []byte arguments, which the peers expect for json columns, is not pgdriver's).
func (e *env) schemaPgx(ctx context.Context, conns int) (*bun.DB, string, error) {
	_, name, err := e.schema(ctx, 1, false)
	if err != nil {
		return nil, "", err
	}
	cfg, err := pgx.ParseConfig(e.dbURL)
	if err != nil {
		return nil, "", err
	}
	cfg.RuntimeParams["search_path"] = name
	sqldb := stdlib.OpenDB(*cfg)
	sqldb.SetMaxOpenConns(conns)
	sqldb.SetMaxIdleConns(conns)
	db := bun.NewDB(sqldb, pgdialect.New())
	e.onClose(func() { _ = db.Close() })
	return db, name, nil
}

// pgxPool opens a pgx pool on schema, for the peers that need pgx.
func (e *env) pgxPool(ctx context.Context, schema string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns, cfg.MinConns = int32(conns), int32(min(conns, 4))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e.onClose(pool.Close)
	return pool, nil
}

// queue returns an asynq queue name of the run's own.
func (e *env) queue(arm string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	q := "bunbench_" + arm + "_" + hex.EncodeToString(b[:])
	e.mu.Lock()
	e.queues = append(e.queues, q)
	e.mu.Unlock()
	return q
}

func (e *env) dropQueue(q string) { _ = e.ins.DeleteQueue(q, true) }

// fail records a failure that ends the run with an error after the parts ran, and says it at once.
func (e *env) fail(msg string) {
	fmt.Fprintf(os.Stderr, "bunbench: FAILED: %s\n", msg)
	e.mu.Lock()
	e.failures = append(e.failures, msg)
	e.mu.Unlock()
}

func (e *env) onClose(f func()) {
	e.mu.Lock()
	e.closers = append(e.closers, f)
	e.mu.Unlock()
}

// closeConns closes the databases and pools opened so far. The run calls it after each part: a part's
// idle connections kept to the end held the server's max_connections (300) by the lull part of make bench.
func (e *env) closeConns() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

func (e *env) close() {
	e.closeConns()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.schemas {
		_, _ = e.admin.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+s+" CASCADE")
	}
	for _, q := range e.queues {
		e.dropQueue(q)
	}
	_ = e.ins.Close()
	_ = e.admin.Close()
}

func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
