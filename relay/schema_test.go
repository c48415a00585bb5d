package relay

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

func TestCheckSchema(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()

	db, _ := outboxtest.Schema(t)
	require.NoError(t, CheckSchema(ctx, db, model.Location{}))

	empty := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
	require.ErrorIs(t, CheckSchema(ctx, empty, model.Location{}), ErrNoSchema)

	// A table from an older schema: the column a later migration added is missing.
	_, err := db.ExecContext(ctx, "ALTER TABLE outbox_events DROP COLUMN max_retry")
	require.NoError(t, err)
	err = CheckSchema(ctx, db, model.Location{})
	require.ErrorContains(t, err, "max_retry")
	require.ErrorContains(t, err, "apply the migrations")
}
