package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bunbox/bunbox/relay/relaymetrics"
)

// metricsHandler serves the relay's metrics (relaymetrics: its counters, histograms and the outbox
// backlog), plus the process and Go runtime metrics, in a registry of its own.
func metricsHandler(m *relaymetrics.Metrics) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		m,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
