package relay

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// BenchmarkDrainByDriver drains the same backlogs with one relay per database/sql driver under bun:
// pgdriver, pgx with its default statement cache (every new query text is prepared on the server, and bun
// puts the values in the text), and pgx with the simple protocol. The three alternate in 6 segments of
// 5,000 rows so that all see the same load on a shared machine; it reports each one's rate and its ratio
// to pgdriver's.
//
//	go test -run '^$' -bench DrainByDriver -benchtime 1x ./relay/
func BenchmarkDrainByDriver(b *testing.B) {
	const segments, perSegment = 6, 5000
	ctx := context.Background()
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr(), PoolSize: 64}
	ins := asynq.NewInspector(redis)
	b.Cleanup(func() { _ = ins.Close() })
	type variant struct {
		name    string
		open    func(schema string) *sql.DB
		db      *bun.DB
		r       *Relay
		queue   string
		done    atomic.Int64
		target  atomic.Int64
		stop    atomic.Value // context.CancelFunc
		elapsed time.Duration
	}
	pgxOpen := func(mode pgx.QueryExecMode) func(string) *sql.DB {
		return func(schema string) *sql.DB {
			cfg, err := pgx.ParseConfig(outboxtest.DatabaseURL())
			if err != nil {
				b.Fatal(err)
			}
			cfg.RuntimeParams["search_path"] = schema
			cfg.DefaultQueryExecMode = mode
			return stdlib.OpenDB(*cfg)
		}
	}
	variants := []*variant{
		{name: "pgdriver", open: func(schema string) *sql.DB {
			return sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(outboxtest.DatabaseURL()),
				pgdriver.WithConnParams(map[string]any{"search_path": schema})))
		}},
		{name: "pgx", open: pgxOpen(pgx.QueryExecModeCacheStatement)},
		{name: "pgx_simple", open: pgxOpen(pgx.QueryExecModeSimpleProtocol)},
	}
	for range b.N {
		for _, v := range variants {
			v.done.Store(0)
			v.target.Store(0)
			v.elapsed = 0
			schema := outboxtest.NewSchema(b)
			sqldb := v.open(schema)
			sqldb.SetMaxIdleConns(20)
			v.db = bun.NewDB(sqldb, pgdialect.New())
			b.Cleanup(func() { _ = v.db.Close() })
			if err := bunboxmigrate.Up(ctx, v.db); err != nil {
				b.Fatal(err)
			}
			v.queue = benchQueuePrefix + randHex(6)
			b.Cleanup(func() { _ = ins.DeleteQueue(v.queue, true) })
			cfg := Config{DisableNotify: true, PublishedRetention: -1}
			cfg.Observer.OnBatch = func(_ context.Context, ev BatchEvent) {
				if v.done.Add(int64(ev.Published)) >= v.target.Load() {
					v.stop.Load().(context.CancelFunc)()
				}
			}
			r, err := New(v.db, redis, cfg)
			if err != nil {
				b.Fatal(err)
			}
			v.r = r
			b.Cleanup(func() { _ = r.Close() })
		}
		for range segments {
			for _, v := range variants {
				if _, err := v.db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload)
SELECT gen_random_uuid(), 'bench.event', ?, '{"order_id":12345,"total":"99.90"}' FROM generate_series(1, ?)`, v.queue, perSegment); err != nil {
					b.Fatal(err)
				}
				segCtx, cancel := context.WithCancel(ctx)
				v.stop.Store(cancel)
				v.target.Add(perSegment)
				start := time.Now()
				if err := v.r.Run(segCtx); err != nil {
					b.Fatal(err)
				}
				v.elapsed += time.Since(start)
				cancel()
			}
		}
		base := float64(variants[0].done.Load()) / variants[0].elapsed.Seconds()
		for _, v := range variants {
			if v.done.Load() != segments*perSegment {
				b.Fatalf("%s relayed %d events, want %d", v.name, v.done.Load(), segments*perSegment)
			}
			rate := float64(v.done.Load()) / v.elapsed.Seconds()
			b.ReportMetric(rate, v.name+"_events/s")
			b.ReportMetric(rate/base, v.name+"/pgdriver")
		}
	}
}
