// Package relaymetrics exposes a bunbox relay to Prometheus: the relay's counters (published, failed,
// dead rows, rounds) and, read from PostgreSQL at scrape time, the backlog, the dead rows and the lag (the
// age of the oldest pending row), which is what to alert on: a lag that grows means events are not
// reaching asynq. [Metrics] adds the histograms an SLO needs (delivery lag, enqueue and round durations)
// and the enqueues per queue and event name, with a cap on distinct label values, from the relay's Observer.
//
//	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{})
//	cfg.Observer = m.Observer(cfg.Observer)
//	r, err := relay.New(db, redisOpt, cfg)
//	reg.MustRegister(relaymetrics.NewCollector(db, r), m)
package relaymetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/relay"
)

// ScrapeTimeoutDefault bounds the backlog query of one scrape.
const ScrapeTimeoutDefault = 5 * time.Second

var (
	descBacklog   = prometheus.NewDesc("bunbox_outbox_backlog", "Outbox rows waiting to be relayed (not published, not dead).", nil, nil)
	descDeadRows  = prometheus.NewDesc("bunbox_outbox_dead", "Outbox rows the relay gave up on, kept for the operator.", nil, nil)
	descLag       = prometheus.NewDesc("bunbox_outbox_lag_seconds", "Age of the oldest pending outbox row; 0 when none is pending.", nil, nil)
	descBlocked   = prometheus.NewDesc("bunbox_outbox_blocked_keys", "Ordering keys held by a dead event: no later event of the key is relayed until it is retried.", nil, nil)
	descCompleted = prometheus.NewDesc("bunbox_relay_keyed_completed_total", "Keyed events whose asynq tasks this relay saw completed, releasing the next event of their key.", nil, nil)
	descUp        = prometheus.NewDesc("bunbox_outbox_up", "1 when the backlog query of this scrape succeeded.", nil, nil)
	descPublished = prometheus.NewDesc("bunbox_relay_published_total", "Rows this relay marked published.", nil, nil)
	descFailed    = prometheus.NewDesc("bunbox_relay_failed_total", "Failed enqueues of single rows by this relay.", nil, nil)
	descDead      = prometheus.NewDesc("bunbox_relay_dead_total", "Rows this relay marked dead.", nil, nil)
	descRounds    = prometheus.NewDesc("bunbox_relay_rounds_total", "Rounds that claimed rows or failed.", nil, nil)
	descFailedRds = prometheus.NewDesc("bunbox_relay_failed_rounds_total", "Rounds that failed (PostgreSQL or Redis unreachable).", nil, nil)
	descCleaned   = prometheus.NewDesc("bunbox_relay_cleaned_total", "Published rows deleted after the retention period.", nil, nil)
)

// Collector is a prometheus.Collector for one relay and its outbox table.
type Collector struct {
	db     bun.IDB
	relay  *relay.Relay
	schema string // InSchema
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector collects the counters of r and the backlog of the outbox table in db. r may be nil (for a
// process that runs no relay, like the CLI's status endpoint); then only the table's gauges are exported.
func NewCollector(db bun.IDB, r *relay.Relay) *Collector { return &Collector{db: db, relay: r} }

// InSchema makes the collector read the backlog of the outbox in schema (relay.Config.Schema) and returns
// it. Without it, the collector reads the schema of its relay, or the default outbox when it has none.
func (c *Collector) InSchema(schema string) *Collector {
	c.schema = schema
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBacklog, descDeadRows, descLag, descBlocked, descUp} {
		ch <- d
	}
	if c.relay != nil {
		for _, d := range []*prometheus.Desc{descPublished, descFailed, descDead, descRounds, descFailedRds, descCleaned, descCompleted} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeoutDefault)
	defer cancel()
	schema := c.schema
	if schema == "" && c.relay != nil {
		schema = c.relay.Schema()
	}
	if schema != "" {
		ctx = admin.WithSchema(ctx, schema)
	}
	b, err := admin.ReadBacklog(ctx, c.db)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
	} else {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(b.Pending))
		ch <- prometheus.MustNewConstMetric(descDeadRows, prometheus.GaugeValue, float64(b.Dead))
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, b.Lag.Seconds())
		ch <- prometheus.MustNewConstMetric(descBlocked, prometheus.GaugeValue, float64(b.BlockedKeys))
	}
	if c.relay == nil {
		return
	}
	s := c.relay.Stats()
	for _, m := range []struct {
		d *prometheus.Desc
		v int64
	}{
		{descPublished, s.Published}, {descFailed, s.Failed}, {descDead, s.Dead},
		{descRounds, s.Rounds}, {descFailedRds, s.FailedRounds}, {descCleaned, s.Cleaned}, {descCompleted, s.Completed},
	} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v))
	}
}
