package relayenv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/relay"
)

func TestQueues(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOX_QUEUES": "critical:6, default:3,bulk:1,", "OUTBOX_STRICT_PRIORITY": "true",
		"OUTBOX_CANCEL_CHECK_INTERVAL": "250ms"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := configFromLookup(lookup)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"critical": 6, "default": 3, "bulk": 1}, c.Queues)
	require.True(t, c.StrictPriority)
	require.Equal(t, 250*time.Millisecond, c.CancelCheckInterval)

	for k, v := range map[string]string{"OUTBOX_QUEUES": "critical=6", "OUTBOX_STRICT_PRIORITY": "maybe",
		"OUTBOX_CANCEL_CHECK_INTERVAL": "soon"} {
		_, err := configFromLookup(func(name string) (string, bool) { return v, name == k })
		require.ErrorIs(t, err, relay.ErrInvalidConfig)
		require.ErrorContains(t, err, k)
	}
}

func TestWakeInterval(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{"20ms": 20 * time.Millisecond, "-1ms": -time.Millisecond} {
		c, err := configFromLookup(func(name string) (string, bool) { return v, name == "OUTBOX_WAKE_INTERVAL" })
		require.NoError(t, err)
		require.Equal(t, want, c.WakeInterval)
	}
	_, err := configFromLookup(func(name string) (string, bool) { return "often", name == "OUTBOX_WAKE_INTERVAL" })
	require.ErrorIs(t, err, relay.ErrInvalidConfig)
	require.ErrorContains(t, err, "OUTBOX_WAKE_INTERVAL")
}
