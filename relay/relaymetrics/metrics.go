package relaymetrics

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// maxLabelValuesDefault is the default of MetricsConfig.MaxLabelValues.
const maxLabelValuesDefault = 50

// otherLabelValue is the queue or event_name label of the values past MetricsConfig.MaxLabelValues.
const otherLabelValue = "other"

// MetricsConfig tunes Metrics. The zero value is ready to use.
type MetricsConfig struct {
	// MaxLabelValues caps the distinct values of each label (queue, and event_name) that Metrics exports;
	// values seen after the cap is reached are counted under the value "other". The series count is then
	// at most MaxLabelValues+1 per queue-labelled histogram and (MaxLabelValues+1)² per counter, whatever
	// names the producers invent. Values are admitted first come, first served, for the life of the
	// process. Defaults to 50.
	MaxLabelValues int
	// DB is the outbox's database: each scrape reads the backlog, dead rows, lag and blocked keys from it
	// (bunbox_outbox_*). Defaults to nil: no table gauges.
	DB bun.IDB
	// Location is the outbox whose table DB's gauges read (relay.Config.Location). Defaults to the
	// outbox of the relay given to SetRelay, or the default outbox without one.
	Location model.Location
}

// Metrics is the one prometheus.Collector of a relay: the outbox table's state at scrape time
// (MetricsConfig.DB), the relay's counters (SetRelay), and what the relay reports through its Observer:
// the latency histograms an SLO needs and the enqueues per queue and event name. It also counts the
// passes of a Reconciler (see ObserveReconcile). Install its observer in the relay's Config before
// relay.New, hand it the relay, and register it:
//
//	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{DB: db})
//	cfg.Observer = m.Observer(cfg.Observer)
//	r, err := relay.New(db, redisOpt, cfg)
//	m.SetRelay(r)
//	reg.MustRegister(m)
//
// Exported series, besides the table's gauges (bunbox_outbox_backlog, _dead, _lag_seconds, _blocked_keys,
// _up) and the relay's counters (bunbox_relay_published_total, _failed_total, _dead_total, _rounds_total,
// _failed_rounds_total, _cleaned_total, _keyed_completed_total):
//
//	bunbox_relay_delivery_lag_seconds{queue}           histogram: from the row's created_at to its task in Redis
//	bunbox_relay_enqueue_duration_seconds              histogram: one enqueue (with Routes, all of a row's tasks)
//	bunbox_relay_round_duration_seconds                histogram: one round (claim, enqueues, marks, commit)
//	bunbox_relay_enqueued_total{queue,event_name}      counter: enqueues that reached Redis (or already had)
//	bunbox_relay_enqueue_errors_total{queue,event_name} counter: enqueues that failed
//	bunbox_reconciler_passes_total                     counter: reconciler passes
//	bunbox_reconciler_pass_errors_total                counter: passes that failed
//	bunbox_reconciler_checked_total                    counter: published rows checked against Redis
//	bunbox_reconciler_missing_total                    counter: rows whose task Redis had lost
//	bunbox_reconciler_requeued_total                   counter: of those, rows put back in line
//
// The delivery lag starts at created_at, the start of the transaction that wrote the row on PostgreSQL's
// clock: it includes that transaction's own duration, and any offset between that clock and the relay's.
type Metrics struct {
	db    bun.IDB
	loc   model.Location // MetricsConfig.Location
	relay atomic.Pointer[relay.Relay]

	queues, names *labels

	lag      *prometheus.HistogramVec
	enqueue  prometheus.Histogram
	round    prometheus.Histogram
	enqueued *prometheus.CounterVec
	errs     *prometheus.CounterVec

	passes, passErrors, checked, missing, requeued prometheus.Counter
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns Metrics with no observations yet. A negative MaxLabelValues, or a Location that
// model.Location.Validate refuses, is an error naming it.
func NewMetrics(cfg MetricsConfig) (*Metrics, error) {
	if cfg.MaxLabelValues < 0 {
		return nil, fmt.Errorf("relaymetrics: MaxLabelValues must be at least 1, got %d", cfg.MaxLabelValues)
	}
	if err := cfg.Location.Validate(); err != nil {
		return nil, fmt.Errorf("relaymetrics: %w", err)
	}
	maxValues := cmp.Or(cfg.MaxLabelValues, maxLabelValuesDefault)
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &Metrics{
		db:     cfg.DB,
		loc:    cfg.Location,
		queues: newLabels(maxValues),
		names:  newLabels(maxValues),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bunbox_relay_delivery_lag_seconds",
			Help:    "Time from an outbox row's created_at (its transaction's start) to its task reaching Redis.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"queue"}),
		enqueue: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bunbox_relay_enqueue_duration_seconds",
			Help:    "Duration of one enqueue into asynq (with routes, of all the tasks of one row).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		round: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bunbox_relay_round_duration_seconds",
			Help:    "Duration of one relay round that claimed rows or failed: claim, enqueues, marks, commit.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bunbox_relay_enqueued_total",
			Help: "Enqueues of outbox rows that reached Redis (or found their task already there).",
		}, []string{"queue", "event_name"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bunbox_relay_enqueue_errors_total",
			Help: "Enqueues of outbox rows that failed.",
		}, []string{"queue", "event_name"}),
		passes:     counter("bunbox_reconciler_passes_total", "Reconciler passes, failed or not."),
		passErrors: counter("bunbox_reconciler_pass_errors_total", "Reconciler passes that failed (PostgreSQL or Redis unreachable)."),
		checked:    counter("bunbox_reconciler_checked_total", "Published rows the reconciler looked up in Redis."),
		missing:    counter("bunbox_reconciler_missing_total", "Published rows whose task Redis had lost."),
		requeued:   counter("bunbox_reconciler_requeued_total", "Published rows the reconciler put back in line because Redis had lost their task."),
	}, nil
}

// SetRelay makes the scrapes export r's counters (Relay.Stats); nil stops them. Call it once relay.New
// returned, with the relay whose Config.Observer holds m.Observer.
func (m *Metrics) SetRelay(r *relay.Relay) { m.relay.Store(r) }

// Observer returns next with the Metrics' observers added to OnBatch and OnEnqueue; next's own callbacks
// still run, after them.
func (m *Metrics) Observer(next relay.Observer) relay.Observer {
	onBatch, onEnqueue := next.OnBatch, next.OnEnqueue
	next.OnBatch = func(ctx context.Context, ev relay.BatchEvent) {
		m.round.Observe(ev.Duration.Seconds())
		if onBatch != nil {
			onBatch(ctx, ev)
		}
	}
	next.OnEnqueue = func(ctx context.Context, ev relay.EnqueueEvent) {
		m.observeEnqueue(ev, time.Now())
		if onEnqueue != nil {
			onEnqueue(ctx, ev)
		}
	}
	return next
}

func (m *Metrics) observeEnqueue(ev relay.EnqueueEvent, now time.Time) {
	queue, name := m.queues.value(ev.Queue), m.names.value(ev.EventName)
	m.enqueue.Observe(ev.Duration.Seconds())
	if ev.Err != nil {
		m.errs.WithLabelValues(queue, name).Inc()
		return
	}
	m.enqueued.WithLabelValues(queue, name).Inc()
	// Export the error series at 0 from the first enqueue on, so that rate() over it works before the
	// first error (Prometheus' advice for labelled counters).
	m.errs.WithLabelValues(queue, name)
	if !ev.CreatedAt.IsZero() {
		m.lag.WithLabelValues(queue).Observe(max(now.Sub(ev.CreatedAt).Seconds(), 0))
	}
}

// ObserveReconcile counts one pass of a Reconciler: call it with what ReconcileOnce returned.
func (m *Metrics) ObserveReconcile(res relay.ReconcileResult, err error) {
	m.passes.Inc()
	if err != nil {
		m.passErrors.Inc()
	}
	m.checked.Add(float64(res.Checked))
	m.missing.Add(float64(res.Missing))
	m.requeued.Add(float64(res.Requeued))
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.lag, m.enqueue, m.round, m.enqueued, m.errs,
		m.passes, m.passErrors, m.checked, m.missing, m.requeued}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	describeState(ch)
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.collectState(ch)
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// labels admits at most max distinct values of one label; the others become otherLabelValue.
type labels struct {
	max  int
	mu   sync.RWMutex
	seen map[string]struct{}
}

func newLabels(max int) *labels { return &labels{max: max, seen: make(map[string]struct{}, max)} }

func (l *labels) value(v string) string {
	l.mu.RLock()
	_, ok := l.seen[v]
	l.mu.RUnlock()
	if ok {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[v]; ok {
		return v
	}
	if len(l.seen) >= l.max {
		return otherLabelValue
	}
	l.seen[v] = struct{}{}
	return v
}
