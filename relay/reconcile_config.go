package relay

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/configcheck"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// Defaults applied by NewReconciler to the zero fields of a ReconcilerConfig.
const (
	reconcileWindowDefault      = time.Hour
	reconcileIntervalDefault    = time.Minute
	reconcileBatchSizeDefault   = 500
	reconcileConcurrencyDefault = 16
	reconcileLeaseTTLDefault    = 30 * time.Second
)

// ReconcilerConfig tunes a Reconciler. The zero value is ready to use.
type ReconcilerConfig struct {
	// Window is how far back the reconciler looks: a sweep (the first pass, a pass after Redis lost data,
	// Sweep) checks the rows published within the last Window; the other passes check the rows published
	// since the previous pass, within Window too. The cost of a sweep grows with Window, that of the other
	// passes does not. It must be shorter than TaskRetention: a task that was completed is visible in Redis only while
	// asynq retains it, so past TaskRetention a completed task and a lost one look the same (both are
	// absent) and the reconciler would re-deliver events that were handled long ago. Keep it also shorter
	// than the relay's Config.PublishedRetention, after which published rows are deleted and cannot be checked.
	// Defaults to 1h.
	Window time.Duration
	// Interval is the pause between two passes of Run. A pass looks up the rows published since the
	// previous one (and sweeps the window when Redis lost data), so a task lost to a Redis failover is
	// re-delivered within about Interval plus the duration of one pass. Defaults to 1m.
	Interval time.Duration
	// BatchSize is how many rows one page of a pass reads (keyset-paginated by published_at and id), 1 to
	// 10000; a page's look-ups go to Redis as one pipeline. Defaults to 500.
	BatchSize int
	// Concurrency bounds the look-ups through Inspector running at once (one Redis round trip each), 1 to
	// 1024; without Inspector a page's look-ups go as one pipeline and Concurrency is not used. Defaults
	// to 16.
	Concurrency int
	// TaskRetention must be the relay's Config.TaskRetention: how long asynq keeps a completed task.
	// It bounds Window. Defaults to 24h, the relay's default.
	TaskRetention time.Duration
	// Routes must be the relay's Config.Routes: an event with listeners is a task per listener (TaskID
	// "<event id>:<listener>"), and its row is requeued when any of them is gone (the relay then
	// re-enqueues all, and the ones still there count as conflicts). A listener added to Routes thus
	// receives, at the next pass, the events of its event name published within Window. Defaults to
	// none: one task per event, TaskID the event id.
	Routes fanout.Routes
	// Logger receives the reconciler's logs. Defaults to a logger that discards everything below Warn and
	// writes warnings and errors to stderr.
	Logger *slog.Logger
	// Inspector, when set, is used instead of the Redis options given to NewReconciler; the reconciler
	// does not close it. It looks tasks up one at a time, and without Redis of its own the reconciler
	// cannot keep markers there (see Reconciler): every pass then sweeps the whole window, and a task whose
	// queue asynq does not know counts as lost. Defaults to nil.
	Inspector Inspector
	// LeaseTTL is how long the reconciler that Relay.Run runs holds the lease "bunbox.reconciler" in the
	// table bunbox_leases after it took or renewed it; it renews it every LeaseTTL/3 and stops reconciling
	// when a renewal has not succeeded within LeaseTTL. When the holder stops (ctx done) it gives the lease
	// up and another relay takes it within LeaseTTL/3; when it dies without a word (SIGKILL, a partition)
	// another takes it within about LeaseTTL and a third of it. 1s to 1h. A Reconciler run apart (Run)
	// takes no lease. Defaults to 30s.
	LeaseTTL time.Duration
	// OnPass, when set, is called by Run (and by the reconciler that Relay.Run runs) after each pass with
	// what the pass returned, on Run's goroutine: e.g. relaymetrics.Metrics.ObserveReconcile. Defaults to
	// nil.
	OnPass func(res ReconcileResult, err error)
	// Location is the outbox to reconcile (its Schema and TablePrefix; its lease is in that outbox's leases
	// table), as Config.Location; the relay's own reconciler takes the relay's. Defaults to the default outbox.
	Location model.Location

	now func() time.Time
}

func (c ReconcilerConfig) withDefaults() ReconcilerConfig {
	c.Window = cmp.Or(c.Window, reconcileWindowDefault)
	c.Interval = cmp.Or(c.Interval, reconcileIntervalDefault)
	c.BatchSize = cmp.Or(c.BatchSize, reconcileBatchSizeDefault)
	c.Concurrency = cmp.Or(c.Concurrency, reconcileConcurrencyDefault)
	c.TaskRetention = cmp.Or(c.TaskRetention, taskRetentionDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, reconcileLeaseTTLDefault)
	c.Logger = cmp.Or(c.Logger, defaultLogger())
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

func (c ReconcilerConfig) validate() error {
	var p configcheck.Problems
	p.Prefixed("", c.problems())
	p.Add(c.Routes.Validate())
	p.Add(validateTables(c.Location))
	return p.Err(ErrInvalidConfig)
}

// problems lists what is wrong with c, each naming its field; Routes are checked apart (by validate, and
// by the relay's Config for its reconciler).
func (c ReconcilerConfig) problems() []error {
	var p configcheck.Problems
	check := p.Check
	check(c.Window > 0, "Window must be positive, got %s", c.Window)
	check(c.TaskRetention >= time.Second, "TaskRetention must be at least 1s, got %s", c.TaskRetention)
	check(c.Window < c.TaskRetention,
		"Window must be shorter than TaskRetention (%s): a completed task is only visible while asynq retains it, got %s",
		c.TaskRetention, c.Window)
	check(c.Interval > 0, "Interval must be positive, got %s", c.Interval)
	check(c.BatchSize >= 1 && c.BatchSize <= 10000, "BatchSize must be between 1 and 10000, got %d", c.BatchSize)
	check(c.Concurrency >= 1 && c.Concurrency <= 1024, "Concurrency must be between 1 and 1024, got %d", c.Concurrency)
	check(c.LeaseTTL >= time.Second && c.LeaseTTL <= time.Hour, "LeaseTTL must be between 1s and 1h, got %s", c.LeaseTTL)
	return p.List()
}

// tables are the outbox's table names, for open.
func (c ReconcilerConfig) tables() tables.Names { return mustNames(c.Location) }
