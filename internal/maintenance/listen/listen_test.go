package listen

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := New(nil, Config{})
	require.ErrorContains(t, err, "Channel is required")
	require.ErrorContains(t, err, "Wake is required")
	_, err = New(nil, Config{Channel: "c", Wake: func() {}, PollInterval: -time.Second})
	require.ErrorContains(t, err, "PollInterval must be positive")
	l, err := New(nil, Config{Channel: "c", Wake: func() {}})
	require.NoError(t, err)
	require.Equal(t, pollIntervalDefault, l.cfg.PollInterval)
}
