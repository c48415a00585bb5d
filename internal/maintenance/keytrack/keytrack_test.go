package keytrack

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := New(nil, tables.Default(), Config{})
	require.ErrorContains(t, err, "Inspector is required")
	_, err = New(nil, tables.Default(), Config{Inspector: &asynq.Inspector{}, Concurrency: -1})
	require.ErrorContains(t, err, "Concurrency must be at least 1")
	tr, err := New(nil, tables.Default(), Config{Inspector: &asynq.Inspector{}})
	require.NoError(t, err)
	require.Equal(t, checkIntervalDefault, tr.cfg.CheckInterval)
	require.Equal(t, concurrencyDefault, tr.cfg.Concurrency)
}

// A relay without a tracker (no inspector) holds a nil *Tracker: what the rounds call on it does nothing.
func TestNilTracker(t *testing.T) {
	t.Parallel()
	var tr *Tracker
	tr.Published([]model.Event{{OrderingKey: "k"}})
	require.NoError(t, tr.RerunArchived(context.Background(), nil, asynq.NewTask("t", nil), nil))
}

// Published kicks the tracker only for a round with keyed rows.
func TestPublishedKicks(t *testing.T) {
	t.Parallel()
	tr, err := New(nil, tables.Default(), Config{Inspector: &asynq.Inspector{}})
	require.NoError(t, err)
	tr.Published([]model.Event{{ID: 1}})
	require.Empty(t, tr.kick)
	tr.Published([]model.Event{{ID: 1}, {ID: 2, OrderingKey: "k"}})
	tr.Published([]model.Event{{ID: 3, OrderingKey: "k"}})
	require.Len(t, tr.kick, 1, "one kick pending is enough")
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ab", truncate("abc", 2))
	require.Equal(t, "a?", truncate("a\xe2\x82\xac", 2), "a cut in a rune")
	require.Equal(t, "ab", truncate("a\x00b", 10))
}
