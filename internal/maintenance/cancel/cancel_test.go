package cancel

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/tables"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := New(nil, tables.Default(), Config{CheckInterval: -time.Second})
	require.ErrorContains(t, err, "CheckInterval must be positive")
	c, err := New(nil, tables.Default(), Config{})
	require.NoError(t, err)
	require.Equal(t, checkIntervalDefault, c.cfg.CheckInterval)
	_, err = c.RunOnce(context.Background())
	require.ErrorContains(t, err, "no Inspector", "a pass needs an Inspector")
}
