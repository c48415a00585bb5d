package relay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	require.NoError(t, c.validate())
	require.Equal(t, batchSizeDefault, c.BatchSize)
	require.Equal(t, concurrencyDefault, c.Concurrency)
	require.Equal(t, workersDefault, c.Workers)
	require.Equal(t, pollIntervalDefault, c.PollInterval)
	require.Equal(t, minPollIntervalDefault, c.MinPollInterval)
	require.Equal(t, taskRetentionDefault, c.TaskRetention)
	require.Equal(t, maxAttemptsDefault, c.MaxAttempts)
	require.Equal(t, retryBackoffDefault, c.RetryBackoff)
	require.Equal(t, retryBackoffMaxDefault, c.RetryBackoffMax)
	require.Equal(t, roundBackoffDefault, c.RoundBackoff)
	require.Equal(t, roundBackoffMaxDefault, c.RoundBackoffMax)
	require.Equal(t, enqueueTimeoutDefault, c.EnqueueTimeout)
	require.Equal(t, publishedRetentionDefault, c.PublishedRetention)
	require.Equal(t, cleanupIntervalDefault, c.CleanupInterval)
	require.Equal(t, cleanupBatchSizeDefault, c.CleanupBatchSize)
	require.NotNil(t, c.Logger)
	require.False(t, c.DisableNotify)

	// Defaults that depend on other fields stay consistent.
	c = Config{PollInterval: time.Millisecond, RoundBackoff: time.Minute, RetryBackoff: 2 * time.Hour}.withDefaults()
	require.NoError(t, c.validate())
	require.Equal(t, time.Millisecond, c.MinPollInterval)
	require.Equal(t, time.Minute, c.RoundBackoffMax)
	require.Equal(t, 2*time.Hour, c.RetryBackoffMax)
	// A negative PublishedRetention disables cleanup and is valid.
	require.NoError(t, Config{PublishedRetention: -1}.withDefaults().validate())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"BatchSizeNegative", Config{BatchSize: -1}, "BatchSize"},
		{"BatchSizeTooLarge", Config{BatchSize: 10001}, "BatchSize"},
		{"ConcurrencyNegative", Config{Concurrency: -3}, "Concurrency"},
		{"ConcurrencyTooLarge", Config{Concurrency: 5000}, "Concurrency"},
		{"WorkersNegative", Config{Workers: -1}, "Workers"},
		{"WorkersTooMany", Config{Workers: 65}, "Workers"},
		{"PollIntervalNegative", Config{PollInterval: -time.Second}, "PollInterval"},
		{"MinPollIntervalAbovePollInterval", Config{PollInterval: time.Second, MinPollInterval: 2 * time.Second}, "MinPollInterval"},
		{"TaskRetentionTooShort", Config{TaskRetention: time.Millisecond}, "TaskRetention"},
		{"MaxAttemptsNegative", Config{MaxAttempts: -1}, "MaxAttempts"},
		{"RetryBackoffNegative", Config{RetryBackoff: -1}, "RetryBackoff"},
		{"RetryBackoffMaxBelowRetryBackoff", Config{RetryBackoff: time.Hour, RetryBackoffMax: time.Minute}, "RetryBackoffMax"},
		{"RoundBackoffNegative", Config{RoundBackoff: -1}, "RoundBackoff"},
		{"RoundBackoffMaxBelowRoundBackoff", Config{RoundBackoff: time.Second, RoundBackoffMax: time.Millisecond}, "RoundBackoffMax"},
		{"EnqueueTimeoutNegative", Config{EnqueueTimeout: -1}, "EnqueueTimeout"},
		{"CleanupIntervalNegative", Config{CleanupInterval: -1}, "CleanupInterval"},
		{"CleanupBatchSizeNegative", Config{CleanupBatchSize: -1}, "CleanupBatchSize"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.withDefaults().validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tt.field+" must")
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		base, limit time.Duration
		n           int
		want        time.Duration
	}{
		{100 * time.Millisecond, 30 * time.Second, -1, 100 * time.Millisecond},
		{100 * time.Millisecond, 30 * time.Second, 0, 100 * time.Millisecond},
		{100 * time.Millisecond, 30 * time.Second, 1, 200 * time.Millisecond},
		{100 * time.Millisecond, 30 * time.Second, 8, 25600 * time.Millisecond},
		{100 * time.Millisecond, 30 * time.Second, 9, 30 * time.Second},
		{100 * time.Millisecond, 30 * time.Second, 1000, 30 * time.Second},
		{time.Second, time.Second, 3, time.Second},
		{time.Hour, time.Duration(1<<63 - 1), 100, time.Duration(1<<63 - 1)},
	} {
		require.Equal(t, tt.want, backoff(tt.base, tt.limit, tt.n), "backoff(%s, %s, %d)", tt.base, tt.limit, tt.n)
	}
	c := Config{}.withDefaults() // roundBackoff and retryDelay, which add jitter: backoff_test.go
	require.Equal(t, minPollIntervalDefault, c.idleWait(1))
	hot := int(hotWindow / minPollIntervalDefault)
	require.Equal(t, minPollIntervalDefault, c.idleWait(hot))
	require.Equal(t, 2*minPollIntervalDefault, c.idleWait(hot+1))
	require.Equal(t, pollIntervalDefault, c.idleWait(hot+100))
}
