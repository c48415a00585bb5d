// Package relaymetrics exposes a bunbox relay to Prometheus: the relay's counters (published, failed,
// dead rows, rounds) and, read from PostgreSQL at scrape time, the backlog, the dead rows and the lag (the
// age of the oldest pending row), which is what to alert on: a lag that grows means events are not
// reaching asynq; and, from the relay's Observer, the histograms an SLO needs (delivery lag, enqueue and
// round durations) and the enqueues per queue and event name, with a cap on distinct label values. One
// collector, [Metrics], exports all of it:
//
//	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{DB: db})
//	cfg.Observer = m.Observer(cfg.Observer)
//	r, err := relay.New(db, redisOpt, cfg)
//	m.SetRelay(r)
//	reg.MustRegister(m)
package relaymetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bunbox/bunbox/admin"
)

// scrapeTimeout bounds the backlog query of one scrape.
const scrapeTimeout = 5 * time.Second

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

// describeState sends the descriptions of the table's gauges and the relay's counters, all of them: a
// Metrics without a database or a relay collects fewer, which prometheus allows.
func describeState(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBacklog, descDeadRows, descLag, descBlocked, descUp,
		descPublished, descFailed, descDead, descRounds, descFailedRds, descCleaned, descCompleted} {
		ch <- d
	}
}

// collectState sends the table's gauges, read from m's database at scrape time, and the counters of m's
// relay, of each what m has.
func (m *Metrics) collectState(ch chan<- prometheus.Metric) {
	if m.db != nil {
		collectTable(ch, m)
	}
	r := m.relay.Load()
	if r == nil {
		return
	}
	s := r.Stats()
	for _, c := range []struct {
		d *prometheus.Desc
		v int64
	}{
		{descPublished, s.Published}, {descFailed, s.Failed}, {descDead, s.Dead},
		{descRounds, s.Rounds}, {descFailedRds, s.FailedRounds}, {descCleaned, s.Cleaned}, {descCompleted, s.Completed},
	} {
		ch <- prometheus.MustNewConstMetric(c.d, prometheus.CounterValue, float64(c.v))
	}
}

func collectTable(ch chan<- prometheus.Metric, m *Metrics) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	loc := m.loc
	if r := m.relay.Load(); loc.Schema == "" && loc.TablePrefix == "" && r != nil {
		loc = r.Location()
	}
	var b admin.Backlog
	ob, err := admin.New(m.db, loc)
	if err == nil {
		b, err = ob.ReadBacklog(ctx)
	}
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
	} else {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(b.Pending))
		ch <- prometheus.MustNewConstMetric(descDeadRows, prometheus.GaugeValue, float64(b.Dead))
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, b.Lag.Seconds())
		ch <- prometheus.MustNewConstMetric(descBlocked, prometheus.GaugeValue, float64(b.BlockedKeys))
	}
}
