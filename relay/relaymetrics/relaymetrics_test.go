package relaymetrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/relay/relaymetrics"
)

func TestMetricsTableAndRelay(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, created_at)
VALUES (gen_random_uuid(), 'a', '{}', now() - interval '90 seconds'), (gen_random_uuid(), 'b', '{}', now())`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, dead_at, published_at) VALUES (gen_random_uuid(), 'c', '{}', now(), NULL)`)
	require.NoError(t, err)

	r, err := relay.New(db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}, relay.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })

	reg := prometheus.NewPedanticRegistry()
	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{DB: db})
	require.NoError(t, err)
	m.SetRelay(r)
	require.NoError(t, reg.Register(m))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP bunbox_outbox_backlog Outbox rows waiting to be relayed (not published, not dead).
# TYPE bunbox_outbox_backlog gauge
bunbox_outbox_backlog 2
# HELP bunbox_outbox_dead Outbox rows the relay gave up on, kept for the operator.
# TYPE bunbox_outbox_dead gauge
bunbox_outbox_dead 1
# HELP bunbox_relay_published_total Rows this relay marked published.
# TYPE bunbox_relay_published_total counter
bunbox_relay_published_total 0
`), "bunbox_outbox_backlog", "bunbox_outbox_dead", "bunbox_relay_published_total"))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "bunbox_outbox_lag_seconds" {
			require.InDelta(t, 90, mf.GetMetric()[0].GetGauge().GetValue(), 10)
			return
		}
	}
	t.Fatal("no bunbox_outbox_lag_seconds")
}
