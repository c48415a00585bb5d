package relaymetrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/relay/relaymetrics"
)

// The backlog and lag gauges count a streamed row the cursor has not passed (with its age), and not one
// it has delivered.
func TestMetricsCountWaitingStreamedRows(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	require.NoError(t, relay.EnableStream(ctx, db, model.Location{}))
	_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload) VALUES (gen_random_uuid(), 'delivered', '{}')`)
	require.NoError(t, err)
	outboxtest.DeliverStream(t, db)
	_, err = db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, payload, created_at)
VALUES (gen_random_uuid(), 'waiting', '{}', now() - interval '90 seconds')`)
	require.NoError(t, err)

	reg := prometheus.NewPedanticRegistry()
	m, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{DB: db})
	require.NoError(t, err)
	require.NoError(t, reg.Register(m))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP bunbox_outbox_backlog Outbox rows waiting to be relayed (not published, not dead).
# TYPE bunbox_outbox_backlog gauge
bunbox_outbox_backlog 1
`), "bunbox_outbox_backlog"))
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
