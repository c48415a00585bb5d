package main

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// TestReadyzOnAReadOnlyDatabase: /readyz says why a relay cannot work on a read-only database.
func TestReadyzOnAReadOnlyDatabase(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	_, schema := outboxtest.Schema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": schema, "default_transaction_read_only": "on"})
	h, err := newHealth(db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.close() })
	rep := h.check(context.Background())
	require.False(t, rep.Ready)
	require.Equal(t, "ok", rep.Postgres)
	require.Contains(t, rep.Schema, "read-only")
	require.Contains(t, rep.Schema, "default_transaction_read_only")
	require.NotContains(t, rep.Schema, "migrate up")
}
