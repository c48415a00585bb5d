package main

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestCancelCommand(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, db := schemaEnv(t)
	pending := insertEvent(t, db, "cart.remind", "q1", "published_at = NULL") // a pending row of the per-row path
	published := insertEvent(t, db, "cart.remind", "q1", "published_at = now()")

	t.Run("Usage", func(t *testing.T) {
		code, _, stderr := runCLI(t, env, "cancel")
		require.Equal(t, 2, code)
		require.Contains(t, stderr, "cancel needs at least one event id")
		code, _, stderr = runCLI(t, env, "cancel", "not-a-uuid")
		require.Equal(t, 2, code)
		require.Contains(t, stderr, `"not-a-uuid" is not an event id`)
	})

	t.Run("UnknownChangesNothing", func(t *testing.T) {
		unknown := uuid.New()
		code, _, stderr := runCLI(t, env, "cancel", pending.EventID.String(), unknown.String())
		require.Equal(t, 1, code)
		require.Contains(t, stderr, unknown.String())
		require.Zero(t, outboxtest.Count(t, db, "outbox_events", "cancelled_at IS NOT NULL"))
	})

	t.Run("Cancel", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "cancel", "-json", pending.EventID.String(), published.EventID.String())
		require.Equal(t, 0, code, stderr)
		var got []cancelledJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &got))
		require.Equal(t, []cancelledJSON{
			{EventID: pending.EventID.String(), Name: "cart.remind", Queue: "q1", Settled: true, Result: "never published"},
			{EventID: published.EventID.String(), Name: "cart.remind", Queue: "q1", Published: true},
		}, got)

		code, stdout, stderr = runCLI(t, env, "cancel", pending.EventID.String())
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "never published", "a second cancel is a no-op")
	})
}
