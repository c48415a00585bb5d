package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/maintenance/reconcile"
)

// ReconcileResult describes one pass of a Reconciler.
type ReconcileResult struct {
	// Checked is the number of published rows whose task (or tasks, with Routes) was looked up in Redis.
	Checked int
	// Missing is the number of them of which Redis no longer had the task (or one of the tasks).
	Missing int
	// Requeued is the number of missing ones put back in line for the relay (a row that changed since it
	// was read, e.g. requeued by another reconciler, is not counted).
	Requeued int
	// Swept reports that the pass looked at every row published within Window (of all queues, or of the
	// queues in LostQueues), not only at the rows published since the previous pass: the first pass of a
	// Reconciler, a pass after Redis lost data, Sweep, and every pass with ReconcilerConfig.Inspector.
	Swept bool
	// LostQueues are the queues whose marker the pass found gone or changed: Redis lost data there since
	// the previous pass (a restart without persistence, a failover to a replica that lagged).
	LostQueues []string
	// MissingTasks names the first 1000 of the Missing events, in the order the pass met
	// them; Missing counts them all.
	MissingTasks []MissingTask
	// Duration is how long the pass took.
	Duration time.Duration
	// HiddenTransactions is the number of transactions of other roles open when the pass began whose
	// start the reconciler's database role cannot read (it is neither superuser nor a member of
	// pg_read_all_stats): the cursor is held back for them (see Reconciler). Zero with the privilege.
	HiddenTransactions int
}

// MissingTask is an event whose task a reconciler pass did not find in Redis.
type MissingTask struct {
	EventID uuid.UUID
	Queue   string
}

// Reconciler re-delivers events whose asynq task Redis lost. asynq acknowledges an enqueue once Redis
// has it in memory; a failover to a replica that lagged, or a restart without persistence, loses such
// tasks although the relay has marked their rows published. The reconciler looks the events' tasks up
// (the task with the event's id in the event's queue); a task in any state (pending, active, scheduled,
// aggregating, retry, archived, completed) is fine; a task scheduled with model.WithProcessAt is there as
// scheduled until its time. For a task that is gone the row's published_at is cleared, so the relay
// enqueues it again with the same TaskID (a conflict there means someone was faster, which is fine).
// Re-delivered events may already have been handled before the loss: consumers must be idempotent, which
// the bunx Inbox provides.
//
// A pass costs what could have been lost, not Window × rate. Before it looks up a queue's tasks, a pass
// writes a marker key of its own in the queue's Redis hash slot (next to asynq's keys for the queue, so on
// the same Cluster node), and the next pass reads it back. Redis keeps or loses its writes in order (an
// append-only file, a replica's stream), so a marker still there proves that every task written before
// it is still there: the pass then looks up only the rows published since the previous pass began (a
// cursor on published_at, held back to the start of any transaction still open then, as a relay's round
// stamps its rows with its transaction's start). Each row is thus looked up about twice. A marker gone or
// changed means that Redis lost data in that queue's slot: the pass then sweeps every row of the queue
// published within Window, and every published row of it whose ProcessAt (model.WithProcessAt) is within
// Window or still ahead. The first pass of a Reconciler sweeps every queue. The look-ups of a page go
// to Redis as one pipeline (EXISTS on asynq's task keys), one round trip per Redis node.
//
// Any number of reconcilers may run (e.g. one next to each relay): each keeps markers of its own, and
// requeueing is conditional on the row being unchanged since it was read. A requeued row keeps its
// attempts; its last_error says why it was requeued.
//
// The relay enqueues a requeued row from the row, so with the same delivery options: a ProcessAt still
// ahead is scheduled again for that time, one that has passed makes the task pending.
//
// Relay.Run runs a Reconciler of its own (Config.Reconciler), one relay per database at a time by a
// lease in the table bunbox_leases; NewReconciler is for teams that run it apart (Config.DisableReconciler
// on the relays), and takes no lease.
//
// Limits: grouped events (model.WithGroup) are not checked, since asynq deletes the tasks it
// aggregated. A task deleted on purpose (Inspector.DeleteTask) or trimmed from a full archive (asynq keeps
// at most 10,000 archived tasks per queue, for 90 days) is noticed only by a sweep (Sweep, or the next
// data loss), and then delivered again. Keys evicted by a Redis maxmemory policy other than noeviction
// are not noticed either (see CheckEvictionPolicy). Rows deleted by the relay's cleanup
// (Config.PublishedRetention) are no longer checked.
//
// The cursor reads the start of the transactions in progress from pg_stat_activity, which shows other
// roles' sessions only to a superuser or a role with the privileges of pg_read_all_stats. Without them,
// the reconciler lists those transactions from pg_locks (by the lock each holds on its virtual
// transaction id, which every role can read) and holds the cursor back to the read before the one that
// first listed each (less a margin), or to the start of the window for those open since its first read:
// every row is still checked, at the cost of more look-ups. ReconcileResult.HiddenTransactions counts
// them, and the reconciler says so once at Info.
type Reconciler struct {
	impl    *reconcile.Reconciler // internal/maintenance/reconcile: the passes
	rdb     redis.UniversalClient // the client NewReconciler made, closed by Close; nil with ReconcilerConfig.Inspector
	running atomic.Bool
}

// NewReconciler checks that the outbox table exists and that Redis answers, and returns a Reconciler.
// redisOpt may be nil when cfg.Inspector is set. Invalid settings give an error wrapping ErrInvalidConfig
// that names the field; a missing table gives ErrNoSchema. Its checks take at most 15s;
// NewReconcilerContext bounds them by a context of the caller's.
func NewReconciler(db *bun.DB, redisOpt asynq.RedisConnOpt, cfg ReconcilerConfig) (*Reconciler, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	return NewReconcilerContext(ctx, db, redisOpt, cfg)
}

// NewReconcilerContext is NewReconciler with the checks (the outbox table, Redis) run within ctx: give it
// a deadline. ctx is not kept: Run takes its own.
func NewReconcilerContext(ctx context.Context, db *bun.DB, redisOpt asynq.RedisConnOpt, cfg ReconcilerConfig) (*Reconciler, error) {
	cfg, err := open(ctx, "NewReconciler", db, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Inspector == nil && redisOpt == nil {
		return nil, errors.New("relay: NewReconciler: give the Redis options or ReconcilerConfig.Inspector")
	}
	r, err := newReconciler(db, redisOpt, cfg)
	if err != nil {
		return nil, err
	}
	if err := pingOpened(ctx, r.rdb, nil); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// newReconciler makes a Reconciler of a valid cfg, with a Redis client of its own made from redisOpt
// unless cfg.Inspector is set; it checks nothing.
func newReconciler(db *bun.DB, redisOpt asynq.RedisConnOpt, cfg ReconcilerConfig) (*Reconciler, error) {
	r := &Reconciler{}
	ic := reconcile.Config{
		Window: cfg.Window, Interval: cfg.Interval, BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency,
		TaskRetention: cfg.TaskRetention, Routes: cfg.Routes, Bounds: defaultBounds().sql, Logger: cfg.Logger, Now: cfg.now,
	}
	if cfg.OnPass != nil {
		ic.OnPass = func(res reconcile.Result, err error) { cfg.OnPass(reconcileResult(res), err) }
	}
	if cfg.Inspector != nil {
		ic.Inspector = cfg.Inspector
	} else {
		rdb, err := fromRedisOpt(redisOpt, func(o asynq.RedisConnOpt) any { return o.MakeRedisClient() })
		if err != nil {
			return nil, err
		}
		r.rdb, _ = rdb.(redis.UniversalClient)
		if r.rdb == nil {
			return nil, fmt.Errorf("relay: unusable Redis options %T: they make no go-redis client", redisOpt)
		}
		ic.Redis = r.rdb
	}
	impl, err := reconcile.New(db, mustNames(cfg.Location), ic)
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	r.impl = impl
	return r, nil
}

// reconcileResult is the public form of a pass's result.
func reconcileResult(res reconcile.Result) ReconcileResult {
	out := ReconcileResult{Checked: res.Checked, Missing: res.Missing, Requeued: res.Requeued, Swept: res.Swept,
		LostQueues: res.LostQueues, Duration: res.Duration, HiddenTransactions: res.HiddenTransactions}
	if res.MissingTasks != nil {
		out.MissingTasks = make([]MissingTask, len(res.MissingTasks))
		for i, m := range res.MissingTasks {
			out.MissingTasks[i] = MissingTask{EventID: m.EventID, Queue: m.Queue}
		}
	}
	return out
}

// Close releases the Redis connections that NewReconciler made (none when ReconcilerConfig.Inspector
// was given). Call it after Run has returned.
func (r *Reconciler) Close() error {
	if r.rdb == nil {
		return nil
	}
	return r.rdb.Close()
}

// Run reconciles at once and then every Interval until ctx is done, and returns nil. A failed pass (Redis
// or PostgreSQL unreachable) is logged and tried again at the next interval, never returned. A second
// Run while one is running returns ErrRunning.
func (r *Reconciler) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)
	return r.impl.Run(ctx)
}

// ReconcileOnce makes one pass, as Run does every Interval: it looks up the tasks of the rows published
// since the previous pass began, or of every row published within Window where that is needed (the
// first pass, Redis lost data; see Reconciler), and requeues the rows whose task Redis lost. Rows are
// read page by page and a page's missing rows are requeued before the next page is read, so a pass cut
// short by an error keeps what it did (see the result); the next pass starts again where this one
// began. Passes of one Reconciler run one at a time.
func (r *Reconciler) ReconcileOnce(ctx context.Context) (ReconcileResult, error) {
	res, err := r.impl.RunOnce(ctx)
	return reconcileResult(res), err
}

// Sweep makes one pass over every row published within Window, whatever the markers say: for a task
// removed from Redis by hand or by eviction, which no marker notices. It costs one look-up per row of
// Window.
func (r *Reconciler) Sweep(ctx context.Context) (ReconcileResult, error) {
	res, err := r.impl.Sweep(ctx)
	return reconcileResult(res), err
}
