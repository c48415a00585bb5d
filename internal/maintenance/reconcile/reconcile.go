// Package reconcile re-delivers events whose asynq task Redis lost: it looks the tasks of the published
// rows up and puts back in line the rows whose task is gone. relay.Reconciler is its public face, and
// documents how it works; Leased is the reconciler a relay runs, under a lease.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
)

// Defaults of the zero fields of a Config.
const (
	windowDefault        = time.Hour
	intervalDefault      = time.Minute
	batchSizeDefault     = 500
	concurrencyDefault   = 16
	taskRetentionDefault = 24 * time.Hour
)

// LastError is what a requeued row's last_error says, for the operator who wonders why a published event
// was enqueued again.
const LastError = "bunbox reconciler: the task was missing from Redis (data loss?); requeued"

// maxReportedMissing bounds Result.MissingTasks, so that a pass after a large loss does not hold every
// missing event in memory.
const maxReportedMissing = 1000

// maxRemembered bounds how many requeued rows a pass remembers (Reconciler.requeued), about 5 MB: past it,
// after a loss of that size, a row published again meanwhile may be looked up a second time, which finds
// its new task and costs one look-up.
const maxRemembered = 100_000

// Inspector looks tasks up: *asynq.Inspector implements it. GetTaskInfo must return an error wrapping
// asynq.ErrTaskNotFound or asynq.ErrQueueNotFound for a task Redis does not have.
type Inspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
}

// Config tunes a Reconciler; relay.ReconcilerConfig documents the fields it shares.
type Config struct {
	// Window is how far back a sweep looks. Defaults to 1h.
	Window time.Duration
	// Interval is the pause between two passes of Run. Defaults to 1m.
	Interval time.Duration
	// BatchSize is how many rows one page reads, 1 to 10000. Defaults to 500.
	BatchSize int
	// Concurrency bounds the look-ups through Inspector running at once, at least 1. Defaults to 16.
	Concurrency int
	// TaskRetention is how long asynq keeps a completed task; Window must be shorter. Defaults to 24h.
	TaskRetention time.Duration
	// Routes are the relay's: an event with listeners is a task per listener. Defaults to none.
	Routes fanout.Routes
	// Redis is where the reconciler keeps its markers and looks tasks up as one pipeline per page.
	// Required unless Inspector is set.
	Redis redis.UniversalClient
	// Inspector, when set, looks tasks up one at a time instead of Redis, and every pass sweeps.
	// Defaults to nil.
	Inspector Inspector
	// Bounds is the set_config statement of the server-side bounds of its transactions (store.Begin).
	// Defaults to none.
	Bounds string
	// Logger receives the reconciler's logs. Defaults to one that discards them.
	Logger *slog.Logger
	// OnPass, when set, is called by Run after each pass with what the pass returned. Defaults to nil.
	OnPass func(res Result, err error)
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	c.Window = cmp.Or(c.Window, windowDefault)
	c.Interval = cmp.Or(c.Interval, intervalDefault)
	c.BatchSize = cmp.Or(c.BatchSize, batchSizeDefault)
	c.Concurrency = cmp.Or(c.Concurrency, concurrencyDefault)
	c.TaskRetention = cmp.Or(c.TaskRetention, taskRetentionDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	add := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	add(c.Window > 0 && c.Window < c.TaskRetention, "Window must be positive and shorter than TaskRetention (%s), got %s", c.TaskRetention, c.Window)
	add(c.Interval > 0, "Interval must be positive, got %s", c.Interval)
	add(c.BatchSize >= 1 && c.BatchSize <= 10000, "BatchSize must be between 1 and 10000, got %d", c.BatchSize)
	add(c.Concurrency >= 1, "Concurrency must be at least 1, got %d", c.Concurrency)
	add(c.Redis != nil || c.Inspector != nil, "Redis or Inspector is required")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("reconcile: invalid config: %w", err)
	}
	return nil
}

// Result describes one pass; relay.ReconcileResult documents its fields.
type Result struct {
	Checked            int
	Missing            int
	Requeued           int
	Swept              bool
	LostQueues         []string
	MissingTasks       []MissingTask
	Duration           time.Duration
	HiddenTransactions int
}

// MissingTask is an event whose task a pass did not find in Redis.
type MissingTask struct {
	EventID uuid.UUID
	Queue   string
}

// Reconciler re-delivers the events of one outbox whose task Redis lost.
type Reconciler struct {
	db    *bun.DB
	names tables.Names
	cfg   Config

	passMu sync.Mutex // one pass at a time
	cursor cursor
	// requeued holds the rows the running pass requeued (at most maxRemembered). A relay stamps a row it
	// publishes with the start of its transaction, which may precede the pass's end bound: a requeued row
	// published again can come back later in the same pass's pages, and is not looked up twice.
	requeued map[int64]bool
	// betweenReads, when set (by tests), runs between a pass's read of the cursors and of the clock.
	betweenReads func()
}

// New returns a Reconciler of the outbox names on db, or an error naming the field of cfg that cannot
// work. It checks nothing on the servers.
func New(db *bun.DB, names tables.Names, cfg Config) (*Reconciler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Reconciler{db: db, names: names, cfg: cfg, cursor: newCursor()}, nil
}

// Interval is the pause between two passes.
func (r *Reconciler) Interval() time.Duration { return r.cfg.Interval }

// Run reconciles at once and then every Interval until ctx is done, and returns nil. A failed pass is
// logged and tried again at the next interval, never returned.
func (r *Reconciler) Run(ctx context.Context) error {
	r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler started",
		slog.Duration("window", r.cfg.Window), slog.Duration("interval", r.cfg.Interval))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			r.cfg.Logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "bunbox reconciler stopped")
			return nil
		case <-timer.C:
		}
		res, err := r.RunOnce(ctx)
		if ctx.Err() == nil {
			r.Report(ctx, res, err)
		}
		timer.Reset(r.cfg.Interval)
	}
}

// Report logs what a pass did (a failed pass and requeued tasks at Warn) and calls OnPass.
func (r *Reconciler) Report(ctx context.Context, res Result, err error) {
	log := r.cfg.Logger
	switch {
	case err != nil:
		log.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler pass failed", slog.Any("err", err),
			slog.Int("checked", res.Checked), slog.Int("requeued", res.Requeued))
	case res.Missing > 0 || len(res.LostQueues) > 0:
		log.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler: tasks missing from Redis were requeued",
			slog.Int("checked", res.Checked), slog.Int("missing", res.Missing),
			slog.Int("requeued", res.Requeued), slog.Any("lost_queues", res.LostQueues),
			slog.Duration("duration", res.Duration))
	default:
		log.LogAttrs(ctx, slog.LevelDebug, "bunbox reconciler pass",
			slog.Int("checked", res.Checked), slog.Duration("duration", res.Duration))
	}
	if r.cfg.OnPass != nil {
		r.cfg.OnPass(res, err)
	}
}

// RunOnce makes one pass, as Run does every Interval: it looks up the tasks of the rows published since
// the previous pass began, or of every row published within Window where that is needed (the first pass,
// Redis lost data), and requeues the rows whose task Redis lost. Rows are read page by page and a page's
// missing rows are requeued before the next page is read, so a pass cut short by an error keeps what it
// did; the next pass starts again where this one began. Passes run one at a time.
func (r *Reconciler) RunOnce(ctx context.Context) (Result, error) {
	return r.pass(ctx, false)
}

// Sweep makes one pass over every row published within Window, whatever the markers say.
func (r *Reconciler) Sweep(ctx context.Context) (Result, error) {
	return r.pass(ctx, true)
}

// pass is RunOnce (sweep false) and Sweep (sweep true).
func (r *Reconciler) pass(ctx context.Context, sweep bool) (res Result, err error) {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	r.requeued = nil // a new map each pass, so that a large one is not kept
	start := r.cfg.Now()
	defer func() { res.Duration = r.cfg.Now().Sub(start) }()

	// The stream's cursors are read before any marker is written (see cursor.streamSince), and before the
	// clock: the next pass reads the streamed rows from the cursors' bounds on, so a row delivered before
	// this read is this pass's to look up, and this pass reads the rows created up to the clock. A row
	// created after the clock and delivered before the read would be neither pass's.
	cursors, err := store.ReadStreamCursors(ctx, r.db, r.names)
	if err != nil {
		return res, fmt.Errorf("relay: reconciler: PostgreSQL: read the stream's cursor: %w", err)
	}
	if r.betweenReads != nil {
		r.betweenReads()
	}
	// So is the horizon (see cursor).
	h, err := store.ReadHorizon(ctx, r.db)
	if err != nil {
		return res, fmt.Errorf("relay: reconciler: PostgreSQL: %w", err)
	}
	streamSince, err := newStreamSince(cursors)
	if err != nil {
		return res, err
	}
	mark := xidMark{xmax: cursors.XMax, at: cursors.At}
	from := h.Now.Add(-r.cfg.Window)
	c := &r.cursor
	c.markXID(mark, from)
	if streamSince.valid { // the stream was turned on: its rows may need the mark after this Reconciler
		if err := r.recordMark(ctx, mark); err != nil {
			return res, fmt.Errorf("relay: reconciler: PostgreSQL: record a time mark of the stream: %w", err)
		}
	}
	horizon := c.holdForHidden(h.Horizon, h.ReadAt, from, h.Hidden)
	res.HiddenTransactions = len(h.Hidden)
	if len(h.Hidden) > 0 && !c.blindLogged {
		c.blindLogged = true
		r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler: its database role cannot read when other roles' "+
			"transactions began (pg_stat_activity shows them only to a superuser or a member of pg_read_all_stats); "+
			"it holds its cursor back for them by their locks in pg_locks instead, which costs some look-ups again: "+
			"GRANT pg_read_all_stats TO the role to avoid it", slog.Int("hidden_transactions", len(h.Hidden)))
	}
	c.begin(from)
	now := h.Now
	if r.cfg.Inspector != nil {
		// No Redis of its own: no markers, so every pass sweeps.
		res.Swept = true
		return res, r.sweep(ctx, &res, Range{From: from, To: now})
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
		if err := r.sweep(ctx, &res, Range{From: from, To: now}); err != nil {
			return res, err
		}
		c.sweepAll = false
		clear(c.sweep)
	default:
		if len(c.sweep) > 0 {
			res.Swept = true
			swept = c.sweepQueues()
			if err := r.sweep(ctx, &res, Range{From: from, To: now, Queues: swept}); err != nil {
				return res, err
			}
			clear(c.sweep)
		}
		incFrom := from
		if c.horizon.After(from) {
			incFrom = c.horizon
		}
		if err := r.scan(ctx, &res, Range{From: incFrom, To: now, NotQueues: swept}); err != nil {
			return res, err
		}
		since := c.streamSince
		if err := r.scanStream(ctx, &res, Range{From: from, To: now, NotQueues: swept}, &since); err != nil {
			return res, err
		}
	}
	c.horizon = horizon
	c.streamSince = streamSince
	return res, nil
}

// Range is the rows a scan reads: published within [From, To] (or, with Scheduled, published before From
// with a process_at at or after From), of the given Queues only (when any) and of none of NotQueues.
type Range struct {
	From, To  time.Time
	Queues    []string
	NotQueues []string
	Scheduled bool
}

// page is the first page of rg.
func (rg Range) page(limit int) store.Page {
	return store.Page{From: rg.From, To: rg.To, Queues: rg.Queues, NotQueues: rg.NotQueues, Scheduled: rg.Scheduled,
		AfterAt: rg.From, Limit: limit}
}

// sweep scans the rows published within rg, then those published before it whose process_at is within
// it or ahead; each time the rows of the per-row path, then the streamed rows the cursor has delivered
// (by their created_at, see scanStream).
func (r *Reconciler) sweep(ctx context.Context, res *Result, rg Range) error {
	if err := r.scan(ctx, res, rg); err != nil {
		return err
	}
	if err := r.scanStream(ctx, res, rg, nil); err != nil {
		return err
	}
	rg.Scheduled = true
	if err := r.scan(ctx, res, rg); err != nil {
		return err
	}
	return r.scanStream(ctx, res, rg, nil)
}

// scan pages through the rows of rg in (published_at, id) order, looks their tasks up and requeues the
// rows whose task is gone.
func (r *Reconciler) scan(ctx context.Context, res *Result, rg Range) error {
	p := rg.page(r.cfg.BatchSize)
	for {
		rows, err := store.ReadPublishedPage(ctx, r.db, r.names, p)
		if err != nil {
			return fmt.Errorf("relay: reconciler: read published rows: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		last := &rows[len(rows)-1]
		p.AfterAt, p.AfterID = last.PageKey, last.ID
		if err := r.checkPage(ctx, res, rows); err != nil {
			return err
		}
		if len(rows) < r.cfg.BatchSize {
			return nil
		}
	}
}

// checkPage looks the tasks of a page of rows up and requeues the rows whose task is gone.
func (r *Reconciler) checkPage(ctx context.Context, res *Result, rows []store.ReconcileRow) error {
	if len(r.requeued) > 0 {
		rows = slices.DeleteFunc(slices.Clone(rows), func(row store.ReconcileRow) bool { return r.requeued[row.ID] })
	}
	missing, err := r.findMissing(ctx, res, rows)
	res.Checked += len(rows)
	res.Missing += len(missing)
	if len(missing) > 0 {
		n, rerr := r.requeue(context.WithoutCancel(ctx), missing)
		res.Requeued += n
		for _, row := range missing {
			if r.requeued == nil {
				r.requeued = map[int64]bool{}
			}
			if len(r.requeued) < maxRemembered {
				r.requeued[row.ID] = true
			}
			if len(res.MissingTasks) < maxReportedMissing {
				res.MissingTasks = append(res.MissingTasks, MissingTask{EventID: row.EventID, Queue: row.Queue})
			}
			r.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "bunbox reconciler: task missing, requeued",
				slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()),
				slog.String("queue", row.Queue))
		}
		if rerr != nil {
			return fmt.Errorf("relay: reconciler: requeue: %w", rerr)
		}
	}
	return err
}

// requeue is store.RequeueMissing in a transaction of its own with the bounds, so that it neither waits
// without end for a lock held by a partitioned relay nor holds its own locks past a partition.
func (r *Reconciler) requeue(ctx context.Context, rows []store.ReconcileRow) (int, error) {
	var n int
	err := store.InTx(ctx, r.db, r.cfg.Bounds, func(tx bun.Tx) error {
		var err error
		n, err = store.RequeueMissing(ctx, tx, r.names, rows, LastError)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
