package worker

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// The default logger writes Warn and above (a failed handler), not Info (a skipped duplicate).
func TestDefaultInboxLoggerWarns(t *testing.T) {
	t.Parallel()
	l := defaultInboxLogger()
	require.True(t, l.Enabled(context.Background(), slog.LevelWarn))
	require.False(t, l.Enabled(context.Background(), slog.LevelInfo))
}
