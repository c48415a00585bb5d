package relayenv

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/relay"
)

// Every Config field that holds a number, a duration, a flag, a string or a map has an OUTBOX_ variable:
// with all of them set, none of those fields is left zero. The Go values and the reconciler's settings
// (flags of `bunbox relay`) are the documented exceptions.
func TestConfigCoversEveryField(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"OUTBOX_BATCH_SIZE": "250", "OUTBOX_BATCH_BYTES": "1048576", "OUTBOX_CONCURRENCY": "8", "OUTBOX_WORKERS": "3",
		"OUTBOX_POLL_INTERVAL": "2s", "OUTBOX_MIN_POLL_INTERVAL": "1ms", "OUTBOX_DISABLE_NOTIFY": "true",
		"OUTBOX_LISTEN_URL": "postgres://app@db/app", "OUTBOX_PREPARED_STATEMENTS": "true",
		"OUTBOX_TASK_RETENTION": "48h", "OUTBOX_MAX_ATTEMPTS": "5", "OUTBOX_RETRY_BACKOFF": "3s",
		"OUTBOX_RETRY_BACKOFF_MAX": "10m", "OUTBOX_ROUND_BACKOFF": "50ms", "OUTBOX_ROUND_BACKOFF_MAX": "10s", "OUTBOX_UNREADY_AFTER": "1m",
		"OUTBOX_ENQUEUE_TIMEOUT": "1s", "OUTBOX_PUBLISHED_RETENTION": "24h", "OUTBOX_CLEANUP_INTERVAL": "5m",
		"OUTBOX_CLEANUP_BATCH_SIZE": "100", "OUTBOX_ROUTES": "order.placed=email", "OUTBOX_KEY_CHECK_INTERVAL": "20ms",
		"OUTBOX_IDLE_IN_TRANSACTION_TIMEOUT": "2m", "OUTBOX_STATEMENT_TIMEOUT": "1m", "OUTBOX_LOCK_TIMEOUT": "5s",
		"OUTBOX_QUEUES": "critical:6,default:3", "OUTBOX_STRICT_PRIORITY": "true", "OUTBOX_CANCEL_CHECK_INTERVAL": "1s",
		"OUTBOX_SCHEMA": "tenant_a", "OUTBOX_TABLE_PREFIX": "orders_", "OUTBOX_WAKE_INTERVAL": "10ms", "OUTBOX_CODEC_KEYS_FILE": keysFile(t),
	}
	c, err := configFromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	require.NoError(t, err)
	require.EqualValues(t, 1<<20, c.BatchBytes)
	without := map[string]bool{"Logger": true, "Enqueuer": true, "Observer": true, "TracerProvider": true,
		"Inspector": true, "DisableReconciler": true, "Reconciler": true}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() || without[f.Name] {
			continue
		}
		require.False(t, v.Field(i).IsZero(), "Config.%s has no OUTBOX_ variable (or the test does not set it)", f.Name)
	}

	_, err = configFromLookup(func(k string) (string, bool) { return "1 MiB", k == "OUTBOX_BATCH_BYTES" })
	require.ErrorIs(t, err, relay.ErrInvalidConfig)
	require.ErrorContains(t, err, "OUTBOX_BATCH_BYTES")
}
