package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/maintenance/keytrack"
	"github.com/bunbox/bunbox/internal/maintenance/wakeup"
	"github.com/bunbox/bunbox/internal/schemaversion"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

var (
	// ErrInvalidConfig is wrapped by the errors of a Config that cannot work; the message names the field.
	ErrInvalidConfig = errors.New("relay: invalid config")
	// ErrNoSchema means the outbox table does not exist: apply the schema first.
	ErrNoSchema = errors.New("relay: table outbox_events does not exist: apply the schema with `bunbox migrate up` or migrate.Up")
	// ErrRunning is returned by Run when the Relay is already running.
	ErrRunning = errors.New("relay: already running")
)

// Relay moves committed outbox rows into asynq. Build it with New and run it with Run.
type Relay struct {
	db      *bun.DB
	cfg     Config
	log     *slog.Logger
	enq     Enqueuer
	pinger  pinger
	rdb     redis.UniversalClient // the connections of the client New made, closed by Close; nil with Config.Enqueuer
	running atomic.Bool
	sizer   claimSizer // how many rows the next claim asks for, under Config.BatchBytes

	stmts *store.Prepared // the hottest statements, prepared (internal/store)

	redisOpt asynq.RedisConnOpt // the Redis options given to New, for the reconciler Run runs (reconcile_relay.go)
	queues   *fairQueues        // Config.Queues as the claim uses it (queues.go); nil without
	wake     wakeup.State       // shared with the wake-up (internal/maintenance/wakeup)

	counters counters
	health   roundHealth // since when the rounds fail, for Ready (health.go)

	names tables.Names // Config.Location: the outbox's tables, qualified (internal/tables)

	stream streamState // the snapshot cursor (stream.go)

	services // cleanup, cancel, key tracker, wake-up, listener, reconciler (services.go)

	// The delivery engine: the rounds (round.go), the two reads they run (claim.go, stream.go) and the
	// enqueues (deliver.go). Made by New.
	rounds    *rounds
	deliverer *deliverer
}

// New checks that the outbox table exists and that Redis answers, and returns a Relay ready to Run.
// redis may be nil when cfg.Enqueuer is set. Invalid settings give an error wrapping ErrInvalidConfig that
// names the field; a missing table gives ErrNoSchema, a read-only database ErrReadOnly. Its checks take at
// most 15s; NewContext bounds them by a context of the caller's.
func New(db *bun.DB, redis asynq.RedisConnOpt, cfg Config) (*Relay, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	return NewContext(ctx, db, redis, cfg)
}

// NewContext is New with the checks (the outbox table, a writable database, Redis, the prepared
// statements) run within ctx: give it a deadline. ctx is not kept: Run takes its own.
func NewContext(ctx context.Context, db *bun.DB, redis asynq.RedisConnOpt, cfg Config) (*Relay, error) {
	cfg, err := open(ctx, "New", db, cfg)
	if err != nil {
		return nil, err
	}
	if err := checkWritable(ctx, db); err != nil {
		return nil, err // a standby, or default_transaction_read_only: every round would fail
	}
	r := &Relay{db: db, cfg: cfg, log: cfg.Logger, enq: cfg.Enqueuer}
	r.redisOpt = redis
	r.names = mustNames(cfg.Location) // validated by open
	r.queues = newFairQueues(cfg)
	if r.enq == nil {
		if redis == nil {
			return nil, errors.New("relay: New: give the Redis options or Config.Enqueuer")
		}
		client, rdb, err := newClient(redis)
		if err != nil {
			return nil, err
		}
		r.rdb, r.enq = rdb, client
	}
	r.stmts = store.NewPrepared(ctx, db, cfg.PreparedStatements, r.names)
	if err := newServices(r, redis); err != nil {
		_ = r.Close()
		return nil, err
	}
	r.engine()
	r.pinger, _ = r.enq.(pinger)
	if err := pingOpened(ctx, r.rdb, r.pinger); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// fromRedisOpt calls an asynq constructor, which panics on unusable Redis options, and returns the panic as
// an error instead.
func fromRedisOpt[T any](redis asynq.RedisConnOpt, mk func(asynq.RedisConnOpt) T) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("relay: unusable Redis options %T: %v", redis, p)
		}
	}()
	return mk(redis), nil
}

// checkSchema returns ErrNoSchema, naming what to run, when the outbox table of names is missing, and an
// error naming both versions when it is at another bunbox schema version than this relay's (newer: run the
// release that applied it; older: apply the migrations).
func checkSchema(ctx context.Context, db bun.IDB, names tables.Names) error {
	exists, err := store.OutboxExists(ctx, db, names)
	if err != nil {
		return fmt.Errorf("relay: PostgreSQL: %w", err)
	}
	if !exists && names.Prefix() != "" {
		return fmt.Errorf("%w (table %s: migrate.Up with migrate.WithLocation(loc), or `bunbox migrate up -schema S -table-prefix P`)", ErrNoSchema, names.Outbox())
	}
	if !exists && !names.IsDefault() {
		return fmt.Errorf("%w (schema %s: migrate.Up with migrate.WithLocation(loc), or `bunbox migrate up -schema S`)", ErrNoSchema, names.QuotedSchema())
	}
	if !exists {
		return ErrNoSchema
	}
	return schemaversion.Check(ctx, db, names, "relay")
}

// Location returns the outbox the relay serves (Config.Location).
func (r *Relay) Location() model.Location { return r.cfg.Location }

// Close releases the Redis connections of the client that New made (none when Config.Enqueuer was
// given). Call it after Run has returned.
func (r *Relay) Close() error {
	err := errors.Join(r.closeServices(), r.stmts.Close())
	if r.rdb == nil {
		return err
	}
	return errors.Join(err, r.rdb.Close()) // asynq refuses to close a client made on a go-redis client it was given
}

// Run relays until ctx is done, then finishes or releases the batch in flight and returns nil: enqueues
// already started finish (each bounded by EnqueueTimeout) and are marked, the rest of the batch is
// released unlocked for the next relay. Errors of
// single rounds (PostgreSQL or Redis unreachable) are logged and retried with backoff, never returned. A
// second Run while one is running returns ErrRunning. Unless Config.DisableReconciler, Run also runs the
// reconciler (see Reconciler; one relay per database at a time) and logs a warning when Redis's eviction
// policy may evict asynq's tasks (see CheckEvictionPolicy).
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	wake := r.wakeCh
	r.startServices(ctx, &wg) // listener, wake-up, cleanup, key tracker, reconciler, cancel (services.go)
	if r.keys == nil {
		keytrack.WarnWithoutTracker(ctx, r.db, r.names, r.log)
	}
	r.warnEviction(ctx)
	r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox relay started", append(r.startAttrs(ctx),
		slog.Int("batch_size", r.cfg.BatchSize), slog.Int("concurrency", r.cfg.Concurrency), slog.Int("workers", r.cfg.Workers),
		slog.Duration("poll_interval", r.cfg.PollInterval))...)
	var workers sync.WaitGroup
	busy := make(chan struct{}, r.cfg.Workers)
	r.stream.busy = busy                                  // a full stream round calls a helper in at once (stream.go)
	workers.Go(func() { r.rounds.loop(ctx, wake, busy) }) // loop.go
	for range r.cfg.Workers - 1 {
		workers.Go(func() { r.rounds.helper(ctx, busy) })
	}
	if r.queues != nil {
		workers.Go(func() { r.rounds.lane(ctx) })        // queues_lane.go
		workers.Go(func() { r.rounds.streamQuiet(ctx) }) // stream_quiet.go
	}
	workers.Wait()
	r.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "bunbox relay stopped")
	return nil
}

// engine makes the relay's delivery engine from what New set up: one deliverer, the two reads, and the
// rounds that run them through one pipeline.
func (r *Relay) engine() {
	cfg := &r.cfg
	r.deliverer = &deliverer{cfg: cfg, enq: r.enq, sem: make(chan struct{}, cfg.Concurrency),
		decoded: newDecodedBudget(r.cfg), rerun: func(ctx context.Context, task *asynq.Task, opts []asynq.Option) error {
			return r.keys.RerunArchived(ctx, r.enq, task, opts)
		}}
	rows := &rowReader{cfg: cfg, claims: store.NewClaims(r.names, r.stmts), sizer: &r.sizer, queues: r.queues,
		keyed: r.keys != nil, wake: &r.wake}
	stream := &streamReader{cfg: cfg, db: r.db, log: r.log, names: r.names, st: store.NewStream(r.names),
		state: &r.stream, wake: &r.wake, deliverer: r.deliverer, queues: r.queues}
	r.rounds = &rounds{cfg: cfg, db: r.db, log: r.log, rows: rows, stream: stream, deliverer: r.deliverer,
		marks: store.NewMarks(r.names, r.stmts), keys: r.keys, counters: &r.counters, health: &r.health}
}
