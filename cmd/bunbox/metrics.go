package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/relay/relaymetrics"
)

// metricsHandler serves the relay's counters and the outbox backlog (relaymetrics), the collectors in
// extra (the relay's relaymetrics.Metrics), plus the process and Go runtime metrics, in a registry of its
// own.
func metricsHandler(r *relay.Relay, db bun.IDB, extra ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(extra...)
	reg.MustRegister(
		relaymetrics.NewCollector(db, r),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
