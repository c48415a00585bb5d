package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestCheckSchema(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()

	db, _ := outboxtest.Schema(t)
	require.NoError(t, CheckSchema(ctx, db, Config{}))

	empty := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
	require.ErrorIs(t, CheckSchema(ctx, empty, Config{}), ErrNoSchema)

	// A table from an older schema: the column a later migration added is missing.
	_, err := db.ExecContext(ctx, "ALTER TABLE outbox_events DROP COLUMN max_retry")
	require.NoError(t, err)
	err = CheckSchema(ctx, db, Config{})
	require.ErrorContains(t, err, "max_retry")
	require.ErrorContains(t, err, "apply the migrations")
}
