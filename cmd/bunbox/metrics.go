package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/relay"
)

// statsSource is what the metrics need from a relay.
type statsSource interface{ Stats() relay.Stats }

// metricsHandler serves the relay's counters and the outbox backlog in Prometheus' text format (version
// 0.0.4), written by hand so that the CLI needs no Prometheus client. The backlog is read from the
// database at each scrape, bounded by a 5s timeout; when that fails, bunbox_outbox_up is 0.
func metricsHandler(r statsSource, db bun.IDB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
		defer cancel()
		b, err := relay.ReadBacklog(ctx, db)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		writeMetrics(w, r.Stats(), b, err == nil)
	})
}

func writeMetrics(w io.Writer, s relay.Stats, b relay.Backlog, backlogOK bool) {
	metric := func(name, typ, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, typ, name, strconv.FormatFloat(v, 'g', -1, 64))
	}
	metric("bunbox_relay_rounds_total", "counter", "Relay rounds that claimed rows or failed.", float64(s.Rounds))
	metric("bunbox_relay_failed_rounds_total", "counter", "Relay rounds that failed (PostgreSQL or Redis unreachable).", float64(s.FailedRounds))
	metric("bunbox_relay_published_total", "counter", "Outbox rows enqueued into asynq and marked published.", float64(s.Published))
	metric("bunbox_relay_failed_total", "counter", "Failed enqueues of single rows.", float64(s.Failed))
	metric("bunbox_relay_dead_total", "counter", "Rows this relay marked dead.", float64(s.Dead))
	metric("bunbox_relay_cleaned_total", "counter", "Published rows deleted after the retention period.", float64(s.Cleaned))
	up := 0.0
	if backlogOK {
		up = 1
		metric("bunbox_outbox_pending", "gauge", "Outbox rows not yet published and not dead.", float64(b.Pending))
		metric("bunbox_outbox_dead", "gauge", "Outbox rows the relay gave up on.", float64(b.Dead))
		metric("bunbox_outbox_lag_seconds", "gauge", "Age of the oldest pending outbox row; 0 when none is pending.", b.Lag.Seconds())
	}
	metric("bunbox_outbox_up", "gauge", "1 when the backlog could be read from the database at this scrape.", up)
}
