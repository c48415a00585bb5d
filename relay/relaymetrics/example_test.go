package relaymetrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/relay/relaymetrics"
)

// Metrics observes the relay through its Observer: install it before relay.New, hand it the relay, and
// register it, the one collector.
func ExampleNewMetrics() {
	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{MaxLabelValues: 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := relay.Config{}
	cfg.Observer = m.Observer(cfg.Observer)
	// r, err := relay.New(db, redisOpt, cfg); m.SetRelay(r) (and MetricsConfig.DB: db for the table's gauges)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	fmt.Println(cfg.Observer.OnEnqueue != nil, cfg.Observer.OnBatch != nil)
	// Output: true true
}
