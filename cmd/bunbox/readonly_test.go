package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// TestReadyzOnAReadOnlyDatabase: the check behind /readyz (relay.CheckSchema, which Relay.Ready reports
// as its schema line) says why a relay cannot work on a read-only database, not to run a migration.
func TestReadyzOnAReadOnlyDatabase(t *testing.T) {
	outboxtest.SkipShort(t)
	outboxtest.SkipPooled(t, "a read-only session (default_transaction_read_only) cannot pass a transaction pooler")
	t.Parallel()
	_, schema := outboxtest.Schema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": schema, "default_transaction_read_only": "on"})
	err := relay.CheckSchema(context.Background(), db, model.Location{})
	require.ErrorIs(t, err, relay.ErrReadOnly)
	require.Contains(t, err.Error(), "read-only")
	require.Contains(t, err.Error(), "default_transaction_read_only")
	require.NotContains(t, err.Error(), "migrate up")
}
