package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
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
	// MissingTasks names the first maxReportedMissing of the Missing events, in the order the pass met
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

// maxReportedMissing bounds ReconcileResult.MissingTasks, so that a pass after a large loss does not hold
// every missing event in memory.
const maxReportedMissing = 1000

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
	db      *bun.DB
	cfg     ReconcilerConfig
	log     *slog.Logger
	ins     Inspector             // with ReconcilerConfig.Inspector: look-ups one at a time, every pass a sweep
	rdb     redis.UniversalClient // otherwise: the client NewReconciler made, closed by Close
	running atomic.Bool

	names tables.Names // ReconcilerConfig.Location

	passMu sync.Mutex // one pass at a time
	cursor reconcileCursor
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
	r := &Reconciler{db: db, cfg: cfg, log: cfg.Logger, ins: cfg.Inspector, cursor: newReconcileCursor(), names: mustNames(cfg.Location)}
	if r.ins != nil {
		return r, nil
	}
	rdb, err := fromRedisOpt(redisOpt, func(o asynq.RedisConnOpt) any { return o.MakeRedisClient() })
	if err != nil {
		return nil, err
	}
	r.rdb, _ = rdb.(redis.UniversalClient)
	if r.rdb == nil {
		return nil, fmt.Errorf("relay: unusable Redis options %T: they make no go-redis client", redisOpt)
	}
	return r, nil
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
	r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler started",
		slog.Duration("window", r.cfg.Window), slog.Duration("interval", r.cfg.Interval))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			r.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "bunbox reconciler stopped")
			return nil
		case <-timer.C:
		}
		res, err := r.ReconcileOnce(ctx)
		if ctx.Err() == nil {
			r.report(ctx, res, err)
		}
		timer.Reset(r.cfg.Interval)
	}
}

// report logs what a pass of Run did (a failed pass and requeued tasks at Warn) and calls OnPass.
func (r *Reconciler) report(ctx context.Context, res ReconcileResult, err error) {
	switch {
	case err != nil:
		r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler pass failed", slog.Any("err", err),
			slog.Int("checked", res.Checked), slog.Int("requeued", res.Requeued))
	case res.Missing > 0 || len(res.LostQueues) > 0:
		r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler: tasks missing from Redis were requeued",
			slog.Int("checked", res.Checked), slog.Int("missing", res.Missing),
			slog.Int("requeued", res.Requeued), slog.Any("lost_queues", res.LostQueues),
			slog.Duration("duration", res.Duration))
	default:
		r.log.LogAttrs(ctx, slog.LevelDebug, "bunbox reconciler pass",
			slog.Int("checked", res.Checked), slog.Duration("duration", res.Duration))
	}
	if r.cfg.OnPass != nil {
		r.cfg.OnPass(res, err)
	}
}

// ReconcileOnce makes one pass, as Run does every Interval: it looks up the tasks of the rows published
// since the previous pass began, or of every row published within Window where that is needed (the
// first pass, Redis lost data; see Reconciler), and requeues the rows whose task Redis lost. Rows are
// read page by page and a page's missing rows are requeued before the next page is read, so a pass cut
// short by an error keeps what it did (see the result); the next pass starts again where this one
// began. Passes of one Reconciler run one at a time.
func (r *Reconciler) ReconcileOnce(ctx context.Context) (ReconcileResult, error) {
	return r.pass(ctx, false)
}

// Sweep makes one pass over every row published within Window, whatever the markers say: for a task
// removed from Redis by hand or by eviction, which no marker notices. It costs one look-up per row of
// Window.
func (r *Reconciler) Sweep(ctx context.Context) (ReconcileResult, error) {
	return r.pass(ctx, true)
}

// reconcileRow is the part of a published row a pass needs.
type reconcileRow struct {
	ID          int64      `bun:"id"`
	EventID     uuid.UUID  `bun:"event_id"`
	Name        string     `bun:"event_name"`
	Queue       string     `bun:"queue"`
	PublishedAt time.Time  `bun:"published_at"`
	ProcessAt   *time.Time `bun:"process_at"`
	PageKey     time.Time  `bun:"page_key"` // the column the page is ordered by: published_at or process_at
	// Streamed marks a streamed row the cursor has delivered (EnableStream): PublishedAt holds its
	// created_at (it has no publish time), and PageXID its xid, by which its pages are ordered.
	Streamed bool   `bun:"streamed"`
	PageXID  string `bun:"page_xid"`
}

// pass is ReconcileOnce (sweep false) and Sweep (sweep true).
func (r *Reconciler) pass(ctx context.Context, sweep bool) (res ReconcileResult, err error) {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	start := r.cfg.now()
	defer func() { res.Duration = r.cfg.now().Sub(start) }()

	// The horizon is read before any marker is written (see reconcileCursor).
	var now, horizon, readAt time.Time
	var hidden []string
	if err := r.db.NewRaw(reconcileHorizonSQL).Scan(ctx, &now, &horizon, &readAt, pgdialect.Array(&hidden)); err != nil {
		return res, fmt.Errorf("relay: reconciler: PostgreSQL: %w", err)
	}
	// So is the stream's cursor (see reconcileCursor.streamFrom).
	var streamFrom sql.NullString
	var mark xidMark
	if err := r.db.NewRaw(r.names.SQL(reconcileStreamFromSQL)).Scan(ctx, &streamFrom, &mark.xmax, &mark.at); err != nil {
		return res, fmt.Errorf("relay: reconciler: PostgreSQL: read the stream's cursor: %w", err)
	}
	from := now.Add(-r.cfg.Window)
	c := &r.cursor
	c.markXID(mark, from)
	if streamFrom.Valid { // the stream was turned on: its rows may need the mark after this Reconciler
		if err := r.recordMark(ctx, mark); err != nil {
			return res, fmt.Errorf("relay: reconciler: PostgreSQL: record a time mark of the stream: %w", err)
		}
	}
	horizon = c.holdForHidden(horizon, readAt, from, hidden)
	res.HiddenTransactions = len(hidden)
	if len(hidden) > 0 && !c.blindLogged {
		c.blindLogged = true
		r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler: its database role cannot read when other roles' "+
			"transactions began (pg_stat_activity shows them only to a superuser or a member of pg_read_all_stats); "+
			"it holds its cursor back for them by their locks in pg_locks instead, which costs some look-ups again: "+
			"GRANT pg_read_all_stats TO the role to avoid it", slog.Int("hidden_transactions", len(hidden)))
	}
	c.begin(from)
	if r.ins != nil {
		// No Redis of its own: no markers, so every pass sweeps.
		res.Swept = true
		return res, r.sweep(ctx, &res, scanRange{from: from, to: now})
	}
	if sweep {
		c.sweepAll = true
	}
	lost, err := r.writeMarkers(ctx, c.knownQueues())
	res.LostQueues = lost
	for _, q := range lost {
		c.sweep[q] = true
	}
	if err != nil {
		return res, err
	}

	var swept []string
	switch {
	case c.sweepAll || c.horizon.IsZero():
		res.Swept = true
		if err := r.sweep(ctx, &res, scanRange{from: from, to: now}); err != nil {
			return res, err
		}
		c.sweepAll = false
		clear(c.sweep)
	default:
		if len(c.sweep) > 0 {
			res.Swept = true
			swept = c.sweepQueues()
			if err := r.sweep(ctx, &res, scanRange{from: from, to: now, queues: swept}); err != nil {
				return res, err
			}
			clear(c.sweep)
		}
		incFrom := from
		if c.horizon.After(from) {
			incFrom = c.horizon
		}
		if err := r.scan(ctx, &res, scanRange{from: incFrom, to: now, notQueues: swept}); err != nil {
			return res, err
		}
		since := c.streamFrom
		if err := r.scanStream(ctx, &res, scanRange{from: from, to: now, notQueues: swept}, &since); err != nil {
			return res, err
		}
	}
	c.horizon = horizon
	c.streamFrom = streamFrom
	return res, nil
}

// scanRange is the rows a scan reads: published within [from, to] (or, with scheduled, published before
// from with a process_at at or after from), of the given queues only (when any) and of none of notQueues.
type scanRange struct {
	from, to  time.Time
	queues    []string
	notQueues []string
	scheduled bool
}

// reconcilePageSQL reads a page of the rows to check, keyset-paginated on (published_at, id), or with
// scheduled on (process_at, id). A row whose process_at is within Window or ahead is swept however long ago
// it was published: its task cannot have run before process_at, nor left Redis before TaskRetention after
// that. Grouped events (model.WithGroup) are left out: asynq deletes a group's tasks once it has
// aggregated them, so a missing task of theirs proves nothing. Cancelled events are left out: their
// tasks are meant to be gone.
const (
	reconcilePageSQL = `SELECT id, event_id, event_name, queue, published_at, process_at, published_at AS page_key
FROM outbox_events
WHERE published_at >= ?0 AND published_at <= ?1 AND (published_at, id) > (?2, ?3) AND task_group IS NULL
  AND cancelled_at IS NULL
  AND (cardinality(?4::text[]) = 0 OR queue = ANY(?4::text[])) AND NOT (queue = ANY(?5::text[]))
ORDER BY published_at, id
LIMIT ?6`
	reconcileScheduledPageSQL = `SELECT id, event_id, event_name, queue, published_at, process_at, process_at AS page_key
FROM outbox_events
WHERE process_at >= ?0 AND published_at < ?0 AND (process_at, id) > (?2, ?3) AND task_group IS NULL
  AND cancelled_at IS NULL
  AND (cardinality(?4::text[]) = 0 OR queue = ANY(?4::text[])) AND NOT (queue = ANY(?5::text[]))
ORDER BY process_at, id
LIMIT ?6`
)

// sweep scans the rows published within rg, then those published before it whose process_at is within
// it or ahead; each time the rows of the per-row path, then the streamed rows the cursor has delivered
// (by their created_at, see scanStream).
func (r *Reconciler) sweep(ctx context.Context, res *ReconcileResult, rg scanRange) error {
	if err := r.scan(ctx, res, rg); err != nil {
		return err
	}
	if err := r.scanStream(ctx, res, rg, nil); err != nil {
		return err
	}
	rg.scheduled = true
	if err := r.scan(ctx, res, rg); err != nil {
		return err
	}
	return r.scanStream(ctx, res, rg, nil)
}

// scan pages through the rows of rg in (published_at, id) order, looks their tasks up and requeues the
// rows whose task is gone.
func (r *Reconciler) scan(ctx context.Context, res *ReconcileResult, rg scanRange) error {
	afterAt, afterID := rg.from, int64(0)
	queues, notQueues := pgdialect.Array(nonNil(rg.queues)), pgdialect.Array(nonNil(rg.notQueues))
	query := reconcilePageSQL
	if rg.scheduled {
		query = reconcileScheduledPageSQL
	}
	for {
		var rows []reconcileRow
		if err := r.db.NewRaw(r.names.SQL(query), rg.from, rg.to, afterAt, afterID, queues, notQueues,
			r.cfg.BatchSize).Scan(ctx, &rows); err != nil {
			return fmt.Errorf("relay: reconciler: read published rows: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		last := &rows[len(rows)-1]
		afterAt, afterID = last.PageKey, last.ID
		if err := r.checkPage(ctx, res, rows); err != nil {
			return err
		}
		if len(rows) < r.cfg.BatchSize {
			return nil
		}
	}
}

// checkPage looks the tasks of a page of rows up and requeues the rows whose task is gone.
func (r *Reconciler) checkPage(ctx context.Context, res *ReconcileResult, rows []reconcileRow) error {
	missing, err := r.findMissing(ctx, res, rows)
	res.Checked += len(rows)
	res.Missing += len(missing)
	if len(missing) > 0 {
		n, rerr := requeueBounded(context.WithoutCancel(ctx), r.db, r.names, missing)
		res.Requeued += n
		for _, row := range missing {
			if len(res.MissingTasks) < maxReportedMissing {
				res.MissingTasks = append(res.MissingTasks, MissingTask{EventID: row.EventID, Queue: row.Queue})
			}
			r.log.LogAttrs(ctx, slog.LevelDebug, "bunbox reconciler: task missing, requeued",
				slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()),
				slog.String("queue", row.Queue))
		}
		if rerr != nil {
			return fmt.Errorf("relay: reconciler: requeue: %w", rerr)
		}
	}
	return err
}

// mustNames returns the Names of schema and prefix, which the config's validate has checked.
func mustNames(loc model.Location) tables.Names {
	names, err := tables.New(loc.Schema, loc.TablePrefix)
	if err != nil {
		panic("relay: unchecked schema: " + err.Error())
	}
	return names
}

// validateTables returns the error of a schema or table prefix bunbox refuses, naming the field
// (Location.Schema or Location.TablePrefix), or nil.
func validateTables(loc model.Location) error {
	_, err := tables.New(loc.Schema, loc.TablePrefix)
	switch {
	case errors.Is(err, tables.ErrInvalidSchema):
		return fmt.Errorf("Location.Schema: %w", err)
	case err != nil:
		return fmt.Errorf("Location.TablePrefix: %w", err)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// requeue clears published_at of the rows that are still exactly as read (same published_at; a streamed
// row still in the stream, which the cursor, moving only forward, still has delivered), so the relay
// enqueues them again: a streamed row becomes a pending row of the per-row path. Never of a keyed row
// seen completed, which would be handled after the events of its key that followed it. It returns how
// many rows it changed.
func requeue(ctx context.Context, db bun.IDB, names tables.Names, rows []reconcileRow) (int, error) {
	ids := make([]int64, len(rows))
	at := make([]time.Time, len(rows))
	streamed := make([]bool, len(rows))
	for i, row := range rows {
		ids[i], at[i], streamed[i] = row.ID, row.PublishedAt, row.Streamed
	}
	res, err := db.NewRaw(names.SQL(`UPDATE outbox_events AS o
SET published_at = NULL, next_attempt_at = NULL, last_error = ?
FROM unnest(?::bigint[], ?::timestamptz[], ?::boolean[]) AS m(id, published_at, streamed)
WHERE o.id = m.id AND CASE WHEN m.streamed THEN o.published_at = 'infinity' ELSE o.published_at = m.published_at END
  AND o.completed_at IS NULL AND o.cancelled_at IS NULL`),
		reconcileLastError, pgdialect.Array(ids), pgdialect.Array(at), pgdialect.Array(streamed)).Exec(ctx)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
