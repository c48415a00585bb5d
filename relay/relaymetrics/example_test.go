package relaymetrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/relay/relaymetrics"
)

// Metrics observes the relay through its Observer: install it before relay.New, register the Metrics
// next to the Collector.
func ExampleNewMetrics() {
	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{MaxLabelValues: 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := relay.Config{}
	cfg.Observer = m.Observer(cfg.Observer)
	// r, err := relay.New(db, redisOpt, cfg)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m) // and relaymetrics.NewCollector(db, r)
	fmt.Println(cfg.Observer.OnEnqueue != nil, cfg.Observer.OnBatch != nil)
	// Output: true true
}
