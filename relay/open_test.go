package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// NewContext and NewReconcilerContext run their checks within the caller's context: an ended one fails
// them with its error, and a live one gives what New and NewReconciler give.
func TestNewContextUsesTheCallersContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := NewContext(ended, b.db, b.redis, Config{})
	require.ErrorIs(t, err, context.Canceled)
	_, err = NewReconcilerContext(ended, b.db, b.redis, ReconcilerConfig{})
	require.ErrorIs(t, err, context.Canceled)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := NewContext(ctx, b.db, b.redis, Config{})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	rc, err := NewReconcilerContext(ctx, b.db, b.redis, ReconcilerConfig{})
	require.NoError(t, err)
	require.NoError(t, rc.Close())

	_, err = NewContext(ctx, nil, b.redis, Config{})
	require.EqualError(t, err, "relay: New: db is nil")
	_, err = NewReconcilerContext(ctx, nil, b.redis, ReconcilerConfig{})
	require.EqualError(t, err, "relay: NewReconciler: db is nil")
}
