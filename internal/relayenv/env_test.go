package relayenv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/relay"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	c, err := configFromLookup(env(nil))
	require.NoError(t, err)
	require.Equal(t, relay.Config{}, c)

	c, err = configFromLookup(env(map[string]string{
		"OUTBOX_BATCH_SIZE":          "250",
		"OUTBOX_CONCURRENCY":         "8",
		"OUTBOX_POLL_INTERVAL":       "2s",
		"OUTBOX_MIN_POLL_INTERVAL":   "1ms",
		"OUTBOX_TASK_RETENTION":      "48h",
		"OUTBOX_MAX_ATTEMPTS":        "5",
		"OUTBOX_RETRY_BACKOFF":       "3s",
		"OUTBOX_RETRY_BACKOFF_MAX":   "10m",
		"OUTBOX_ROUND_BACKOFF":       "50ms",
		"OUTBOX_ROUND_BACKOFF_MAX":   "10s",
		"OUTBOX_ENQUEUE_TIMEOUT":     "1s",
		"OUTBOX_PUBLISHED_RETENTION": "-1s",
		"OUTBOX_CLEANUP_INTERVAL":    "5m",
		"OUTBOX_CLEANUP_BATCH_SIZE":  "100",
		"OUTBOX_DISABLE_NOTIFY":      "true",
		"OUTBOX_ROUTES":              "order.placed=email, stock; order.paid=ledger;",
	}))
	require.NoError(t, err)
	require.Equal(t, relay.Config{
		BatchSize: 250, Concurrency: 8, PollInterval: 2 * time.Second, MinPollInterval: time.Millisecond,
		TaskRetention: 48 * time.Hour, MaxAttempts: 5, RetryBackoff: 3 * time.Second, RetryBackoffMax: 10 * time.Minute,
		RoundBackoff: 50 * time.Millisecond, RoundBackoffMax: 10 * time.Second, EnqueueTimeout: time.Second, PublishedRetention: -time.Second,
		CleanupInterval: 5 * time.Minute, CleanupBatchSize: 100, DisableNotify: true,
		Routes: fanout.Routes{"order.placed": {"email", "stock"}, "order.paid": {"ledger"}},
	}, c)

	for _, bad := range []struct{ name, value string }{
		{"OUTBOX_BATCH_SIZE", "lots"},
		{"OUTBOX_POLL_INTERVAL", "5"},
		{"OUTBOX_TASK_RETENTION", "a day"},
		{"OUTBOX_MAX_ATTEMPTS", "1.5"},
		{"OUTBOX_DISABLE_NOTIFY", "maybe"},
		{"OUTBOX_ROUTES", "order.placed"},
		{"OUTBOX_ROUTES", "=email"},
	} {
		_, err := configFromLookup(env(map[string]string{bad.name: bad.value}))
		require.ErrorIs(t, err, relay.ErrInvalidConfig)
		require.ErrorContains(t, err, bad.name)
	}
}
