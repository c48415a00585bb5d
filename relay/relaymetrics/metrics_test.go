package relaymetrics_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/relay/relaymetrics"
)

func TestMetricsBoundLabelValues(t *testing.T) {
	t.Parallel()
	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{MaxLabelValues: 2})
	require.NoError(t, err)
	hooks := m.Observer(relay.Observer{})
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c", "d", "a"} {
		hooks.OnEnqueue(ctx, relay.EnqueueEvent{Queue: "q-" + name, EventName: name, CreatedAt: time.Now(), Duration: time.Millisecond})
	}
	hooks.OnEnqueue(ctx, relay.EnqueueEvent{Queue: "q-z", EventName: "z", Err: errors.New("boom")})

	enqueued := func(queue, name string) float64 {
		return testutil.ToFloat64(mustCounter(t, m, "bunbox_relay_enqueued_total", queue, name))
	}
	require.Equal(t, 2.0, enqueued("q-a", "a"))
	require.Equal(t, 1.0, enqueued("q-b", "b"))
	require.Equal(t, 2.0, enqueued("other", "other"), "c and d are past the cap")
	require.Equal(t, 1.0, testutil.ToFloat64(mustCounter(t, m, "bunbox_relay_enqueue_errors_total", "other", "other")))
	// 2 admitted + "other": the series count stays bounded whatever the names.
	require.Equal(t, 3, testutil.CollectAndCount(m, "bunbox_relay_enqueued_total"))
	require.Equal(t, 3, testutil.CollectAndCount(m, "bunbox_relay_delivery_lag_seconds"), "queues q-a, q-b and other")

	_, err = relaymetrics.NewMetrics(relaymetrics.MetricsConfig{MaxLabelValues: -1})
	require.ErrorContains(t, err, "MaxLabelValues")
}

// mustCounter finds the counter of name with the given label values among m's metrics.
func mustCounter(t *testing.T, m *relaymetrics.Metrics, name, queue, event string) prometheus.Collector {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, metric := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range metric.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if got["queue"] == queue && got["event_name"] == event {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(metric.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no %s{queue=%q,event_name=%q}", name, queue, event)
	return nil
}

// TestMetricsAfterDrain runs a real relay over a backlog and checks that the histograms and counters saw
// every row.
func TestMetricsAfterDrain(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	queue := fmt.Sprintf("metrics_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	})
	const n = 30
	for i := range n {
		ev, err := model.NewEvent(fmt.Sprintf("metrics.e%d", i%3), map[string]int{"i": i}, model.WithQueue(queue))
		require.NoError(t, err)
		_, err = db.NewInsert().Model(ev).Exec(ctx)
		require.NoError(t, err)
	}
	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{})
	require.NoError(t, err)
	r, err := relay.New(db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()},
		relay.Config{Observer: m.Observer(relay.Observer{}), Logger: outboxtest.Logger(t), BatchSize: 7})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(runCtx) }()
	outboxtest.WaitFor(t, 30*time.Second, "the backlog drained", func() bool {
		return outboxtest.CountUndelivered(t, db, "") == 0
	})
	cancel()
	require.NoError(t, <-stopped)

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string]float64{}
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			if h := metric.GetHistogram(); h != nil {
				byName[mf.GetName()] += float64(h.GetSampleCount())
			} else if c := metric.GetCounter(); c != nil {
				byName[mf.GetName()] += c.GetValue()
			}
		}
	}
	require.Equal(t, float64(n), byName["bunbox_relay_delivery_lag_seconds"])
	require.Equal(t, float64(n), byName["bunbox_relay_enqueue_duration_seconds"])
	require.Equal(t, float64(n), byName["bunbox_relay_enqueued_total"])
	// A per-row round claims at most BatchSize rows; a stream round reads several batches ahead and is
	// one round for them all.
	minRounds := 1.0
	if outboxtest.StreamOff() {
		minRounds = float64(n / 7)
	}
	require.GreaterOrEqual(t, byName["bunbox_relay_round_duration_seconds"], minRounds)
	require.Equal(t, 3, testutil.CollectAndCount(m, "bunbox_relay_enqueued_total"), "one series per event name")
}

// TestNewMetricsRefusesABadLocation: a Location bunbox refuses is an error naming the field, rather than a
// bunbox_outbox_up of 0 at every scrape.
func TestNewMetricsRefusesABadLocation(t *testing.T) {
	t.Parallel()
	_, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{Location: model.Location{Schema: "a b"}})
	require.ErrorContains(t, err, `relaymetrics: model: Location.Schema: invalid schema name "a b"`)
	_, err = relaymetrics.NewMetrics(relaymetrics.MetricsConfig{Location: model.Location{TablePrefix: "Orders_"}})
	require.ErrorContains(t, err, `Location.TablePrefix: invalid table prefix "Orders_"`)
	_, err = relaymetrics.NewMetrics(relaymetrics.MetricsConfig{Location: model.Location{Schema: "tenant_a", TablePrefix: "orders_"}})
	require.NoError(t, err)
}
