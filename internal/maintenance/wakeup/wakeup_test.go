package wakeup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := New(nil, tables.Default(), Config{})
	require.ErrorContains(t, err, "State is required")
	require.ErrorContains(t, err, "Wake is required")
	_, err = New(nil, tables.Default(), Config{State: &State{}, Wake: func() {}, Interval: -time.Millisecond})
	require.ErrorContains(t, err, "Interval must be positive")
	w, err := New(nil, tables.Default(), Config{State: &State{}, Wake: func() {}})
	require.NoError(t, err)
	require.Equal(t, intervalDefault, w.cfg.Interval)
}

// Note keeps the largest id claimed, whatever the order of the claims, and when rows last came.
func TestStateNote(t *testing.T) {
	t.Parallel()
	var s State
	s.Note(nil)
	require.Zero(t, s.RowsAt.Load(), "an empty claim is no rows")
	s.Note([]model.Event{{ID: 7}, {ID: 3}})
	s.Note([]model.Event{{ID: 5}})
	require.EqualValues(t, 7, s.Claimed.Load())
	require.NotZero(t, s.RowsAt.Load())
}
