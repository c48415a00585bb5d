package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/bunbox/bunbox/internal/configcheck"
	"github.com/bunbox/bunbox/internal/pgerr"
)

// Defaults applied by NewInboxCleaner to the zero fields of an InboxCleanerConfig.
const (
	inboxWindowDefault          = 30 * 24 * time.Hour
	inboxMaxRetryDefault        = 25               // asynq's default MaxRetry
	inboxTaskTimeoutDefault     = 30 * time.Minute // asynq's default Timeout
	inboxCleanupBatchDefault    = 1000
	inboxCleanupIntervalDefault = time.Hour
	// inboxTaskRetentionDefault is the relay's default Config.TaskRetention (24h).
	inboxTaskRetentionDefault = 24 * time.Hour
	// inboxReconcileWindowDefault is the reconciler's default ReconcilerConfig.Window
	// (1h).
	inboxReconcileWindowDefault = time.Hour
	// inboxReconcileMarginDefault covers what lies between a row leaving the reconciler's window and the
	// last copy it enqueued reaching a handler: the reconciler's Interval (1m by default), one pass, and
	// the queue's latency.
	inboxReconcileMarginDefault = time.Hour
)

// ErrInvalidConfig is wrapped by the error of an InboxCleanerConfig that cannot work; the message names the
// field.
var ErrInvalidConfig = errors.New("worker: invalid InboxCleanerConfig")

// inboxMinWindow is the shortest Window NewInboxCleaner accepts, whatever the other settings. Besides
// asynq's own retries, the relay's Reconciler may enqueue a handled event again when Redis lost its
// completed task: for rows published within its Window (1h by default), which it keeps below the relay's
// TaskRetention (24h by default). A record must outlive that too: see InboxCleanerConfig.MinWindow.
const inboxMinWindow = 24 * time.Hour

// asynqRecoverySpan is the longest asynq takes to notice that a worker died holding a task: the lease
// (30s, asynq's internal rdb.LeaseDuration), the recoverer's allowance for clock skew (30s) and its
// interval (1m), all fixed in asynq v0.26.
const asynqRecoverySpan = 2 * time.Minute

// asynqRedeliverySpan is the longest time over which asynq v0.26 may deliver one task again after its
// first delivery, for a task of maxRetry retries whose attempts each run at most timeout, with the
// server's default RetryDelayFunc (asynq.DefaultRetryDelayFunc, taken at its largest: n⁴+15+29(n+1)
// seconds before retry n+1): the sum of every retry delay, plus, for every attempt, the timeout and the
// time asynq takes to recover a task whose worker died (2m). With asynq's defaults (25 retries, 30m) it
// is about 21 days. It saturates at the largest time.Duration.
func asynqRedeliverySpan(maxRetry int, timeout time.Duration) time.Duration {
	var secs float64
	for n := range max(maxRetry, 0) {
		f := float64(n)
		secs += f*f*f*f + 15 + 29*(f+1)
	}
	total := secs*float64(time.Second) + float64(max(maxRetry, 0)+1)*float64(max(timeout, 0)+asynqRecoverySpan)
	if total >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(total)
}

// InboxCleanerConfig tunes an InboxCleaner. The zero value is ready to use with asynq's default retry
// settings and the relay's default TaskRetention and reconciler Window; a worker whose relay changes
// those gives the same values here.
type InboxCleanerConfig struct {
	// Window is how long the record of a handled event is kept: a repeated delivery within Window is
	// recognised and skipped, one after it runs the handler again. It must be at least MinWindow: the
	// longest time asynq may deliver a task again (computed from MaxRetry and TaskTimeout,
	// or RedeliverySpan), the time the relay's reconciler may enqueue it again (the larger of
	// TaskRetention and ReconcileWindow, plus ReconcileMargin), and never below 24h. Defaults
	// to 720h (30 days).
	Window time.Duration
	// MaxRetry is the largest MaxRetry of the tasks the Inbox's handlers process (model.WithMaxRetry of
	// their events; asynq's default for the others), 0 to 100. 0 means the default: for tasks that never
	// retry, give RedeliverySpan instead. Defaults to 25, asynq's default.
	MaxRetry int
	// TaskTimeout is the longest one attempt of those tasks may run: the largest Timeout among them
	// (model.WithTimeout; asynq's default for the others). Defaults to 30m, asynq's default.
	TaskTimeout time.Duration
	// RedeliverySpan replaces the span computed from MaxRetry and TaskTimeout as the longest redelivery span,
	// for workers with a RetryDelayFunc of their own: the sum of its largest delays plus, per attempt, the
	// timeout and 2m. Defaults to 0: computed from MaxRetry and TaskTimeout with asynq's default delays.
	RedeliverySpan time.Duration
	// BatchSize is how many records one DELETE removes, 1 to 10000: small statements hold few locks and
	// never run long. Defaults to 1000.
	BatchSize int
	// Interval is the pause between two passes of Run. Defaults to 1h.
	Interval time.Duration
	// TaskRetention must be the relay's Config.TaskRetention (and the reconciler's), at least 1s: how
	// long asynq keeps a completed task, which bounds how far back the reconciler looks for tasks Redis
	// lost. Defaults to 24h, the relay's default.
	TaskRetention time.Duration
	// ReconcileWindow must be the reconciler's ReconcilerConfig.Window (the relay's reconciler, on by
	// default): it enqueues again, after a Redis data loss, the events published within that window,
	// handled or not. Defaults to 1h, the reconciler's default.
	ReconcileWindow time.Duration
	// ReconcileMargin is added to the larger of TaskRetention and ReconcileWindow for the time between a
	// row leaving the reconciler's window and the copy it enqueued last reaching a handler: make it at
	// least the reconciler's Interval plus the queue's longest wait. Defaults to 1h.
	ReconcileMargin time.Duration
}

// withDefaults fills the zero fields.
func (c InboxCleanerConfig) withDefaults() InboxCleanerConfig {
	c.Window = cmp.Or(c.Window, inboxWindowDefault)
	if c.MaxRetry == 0 {
		c.MaxRetry = inboxMaxRetryDefault
	}
	c.TaskTimeout = cmp.Or(c.TaskTimeout, inboxTaskTimeoutDefault)
	c.BatchSize = cmp.Or(c.BatchSize, inboxCleanupBatchDefault)
	c.Interval = cmp.Or(c.Interval, inboxCleanupIntervalDefault)
	c.TaskRetention = cmp.Or(c.TaskRetention, inboxTaskRetentionDefault)
	c.ReconcileWindow = cmp.Or(c.ReconcileWindow, inboxReconcileWindowDefault)
	c.ReconcileMargin = cmp.Or(c.ReconcileMargin, inboxReconcileMarginDefault)
	return c
}

// MinWindow is the shortest Window the configuration accepts: the longest of the redelivery span (asynq
// delivering the task again), the reconcile span (the larger of TaskRetention and ReconcileWindow, plus
// ReconcileMargin: the reconciler enqueueing it again after Redis lost it), and 24h. A record
// deleted sooner lets either run the handler a second time. The zero fields count as their defaults.
func (c InboxCleanerConfig) MinWindow() time.Duration {
	return c.withDefaults().minWindow()
}

// minWindow is MinWindow of a configuration with its defaults applied.
func (c InboxCleanerConfig) minWindow() time.Duration {
	return max(c.redeliverySpan(), c.reconcileSpan(), inboxMinWindow)
}

func (c InboxCleanerConfig) redeliverySpan() time.Duration {
	if c.RedeliverySpan != 0 {
		return c.RedeliverySpan
	}
	return asynqRedeliverySpan(c.MaxRetry, c.TaskTimeout)
}

// reconcileSpan is how long after an event's first delivery the reconciler may still enqueue it again.
func (c InboxCleanerConfig) reconcileSpan() time.Duration {
	return satAdd(max(c.TaskRetention, c.ReconcileWindow), c.ReconcileMargin)
}

// satAdd adds two non-negative durations, saturating at the largest time.Duration.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func (c InboxCleanerConfig) validate() error {
	var p configcheck.Problems
	check := p.Check
	check(c.MaxRetry >= 0 && c.MaxRetry <= 100, "MaxRetry must be between 0 and 100, got %d", c.MaxRetry)
	check(c.TaskTimeout >= 0, "TaskTimeout must not be negative, got %s", c.TaskTimeout)
	check(c.RedeliverySpan >= 0, "RedeliverySpan must not be negative, got %s", c.RedeliverySpan)
	check(c.BatchSize >= 1 && c.BatchSize <= 10000, "BatchSize must be between 1 and 10000, got %d", c.BatchSize)
	check(c.Interval >= 0, "Interval must not be negative, got %s", c.Interval)
	check(c.TaskRetention >= time.Second, "TaskRetention must be at least 1s (the relay's Config.TaskRetention), got %s", c.TaskRetention)
	check(c.ReconcileWindow >= 0, "ReconcileWindow must not be negative, got %s", c.ReconcileWindow)
	check(c.ReconcileMargin >= 0, "ReconcileMargin must not be negative, got %s", c.ReconcileMargin)
	if len(p.List()) == 0 {
		if minW := c.minWindow(); c.Window < minW {
			var why string
			switch minW {
			case c.redeliverySpan():
				why = fmt.Sprintf("asynq may deliver a task again up to %s after its first delivery (MaxRetry %d, TaskTimeout %s)",
					minW, c.MaxRetry, c.TaskTimeout)
				if c.RedeliverySpan != 0 {
					why = fmt.Sprintf("RedeliverySpan is %s", c.RedeliverySpan)
				}
			case c.reconcileSpan():
				why = fmt.Sprintf("the relay's reconciler may enqueue a handled event again up to max(TaskRetention %s, ReconcileWindow %s) + ReconcileMargin %s after it was published",
					c.TaskRetention, c.ReconcileWindow, c.ReconcileMargin)
			default:
				why = fmt.Sprintf("a reconciler may enqueue a handled event again within the relay's TaskRetention (at least %s in any case)", inboxMinWindow)
			}
			p.Add(fmt.Errorf("Window %s is too short: %s; a record deleted sooner lets a redelivered task run its handler twice: make Window at least %s",
				c.Window, why, minW))
		}
	}
	return p.Err(ErrInvalidConfig)
}

// InboxCleaner deletes the inbox_events records older than its Window, so that the inbox does not grow
// forever. Run it in the worker process (or any one process per database: several cleaners are safe, they
// skip each other's rows).
//
//	cleaner, err := worker.NewInboxCleaner(inbox, worker.InboxCleanerConfig{})
//	go cleaner.Run(ctx)
type InboxCleaner struct {
	in  *Inbox
	cfg InboxCleanerConfig
}

// NewInboxCleaner returns a cleaner of in's records. It applies cfg's defaults and refuses a configuration
// whose Window is shorter than MinWindow, with an error that names the field.
func NewInboxCleaner(in *Inbox, cfg InboxCleanerConfig) (*InboxCleaner, error) {
	if in == nil {
		return nil, errors.New("worker: NewInboxCleaner: the inbox must not be nil")
	}
	if in.err != nil {
		return nil, in.err
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &InboxCleaner{in: in, cfg: cfg}, nil
}

// Run cleans now and then every Interval until ctx ends, and returns nil then. A failed pass is logged
// (with the Inbox's logger) and retried at the next interval.
func (c *InboxCleaner) Run(ctx context.Context) error {
	ticker := time.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	for {
		if _, err := c.Cleanup(ctx); err != nil && ctx.Err() == nil {
			c.in.logger.LogAttrs(ctx, slog.LevelWarn, "bunbox inbox: cleanup failed", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// cleanupSQL deletes up to a batch of the oldest expired records: handled_at is compared with the
// database's clock, which also wrote it. SKIP LOCKED lets cleaners run side by side.
const cleanupSQL = `DELETE FROM inbox_events WHERE (event_id, handler) IN (
  SELECT event_id, handler FROM inbox_events
  WHERE handled_at < now() - ? * interval '1 microsecond'
  ORDER BY handled_at LIMIT ? FOR UPDATE SKIP LOCKED)`

// Cleanup makes one pass: it deletes the records handled more than Window ago, BatchSize per statement
// (each its own transaction), until none is left or ctx ends, and returns how many it deleted.
func (c *InboxCleaner) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		res, err := c.in.db.NewRaw(c.in.tables.SQL(cleanupSQL), c.cfg.Window.Microseconds(), c.cfg.BatchSize).Exec(ctx)
		if err != nil {
			if pgerr.Is(err, pgerr.UndefinedTable) {
				return total, fmt.Errorf("worker: the inbox table is missing: apply the migrations (bunboxmigrate.Up, or `bunbox migrate up`): %w", err)
			}
			return total, fmt.Errorf("worker: cleanup: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("worker: cleanup: %w", err)
		}
		total += n
		if n < int64(c.cfg.BatchSize) {
			break
		}
	}
	if total > 0 {
		c.in.logger.LogAttrs(ctx, slog.LevelInfo, "bunbox inbox: deleted records past the window",
			slog.Int64("rows", total), slog.Duration("window", c.cfg.Window))
	}
	return total, ctx.Err()
}
