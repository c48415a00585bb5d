package reconcile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/store"
)

// A sweep reads the stream's index from the xmax of the latest mark taken at or before the window's
// start, "0" without one; marks no sweep needs are forgotten.
func TestXIDMarks(t *testing.T) {
	c := newCursor()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	require.Equal(t, "0", c.sweepFromXID(t0))
	for i, xmax := range []string{"100", "200", "300", "400"} {
		at := t0.Add(time.Duration(i) * time.Minute)
		c.markXID(xidMark{xmax: xmax, at: at}, at.Add(-90*time.Second))
	}
	// The window of the last pass began at 12:01:30: the marks of 12:01 (the latest before it), 12:02, 12:03.
	require.Equal(t, []string{"200", "300", "400"}, []string{c.xidMarks[0].xmax, c.xidMarks[1].xmax, c.xidMarks[2].xmax})
	require.Len(t, c.xidMarks, 3)
	require.Equal(t, "200", c.sweepFromXID(t0.Add(90*time.Second)))
	require.Equal(t, "300", c.sweepFromXID(t0.Add(2*time.Minute)), "a mark at the window's start")
	require.Equal(t, "0", c.sweepFromXID(t0.Add(30*time.Second)), "no mark before the window")
}

// An incremental pass reads the streamed rows from the least xmax of the bounding snapshots, and on their
// own the xids below it that one of them had in progress; without a bounding snapshot (no cursor row) it
// reads every row, and a snapshot it cannot parse is an error that names it.
func TestStreamSince(t *testing.T) {
	since, err := newStreamSince(store.StreamCursors{Bounds: []string{"10:20:12,15", "18:25:19,21", "9:30:"},
		Names: []string{"outbox"}, Snaps: []string{"9:30:"}})
	require.NoError(t, err)
	require.True(t, since.valid)
	require.EqualValues(t, 20, since.from)
	require.Equal(t, []uint64{12, 15, 19}, since.xips, "21 is at or above from: the range reads it")
	require.Equal(t, []string{"outbox"}, since.names)

	since, err = newStreamSince(store.StreamCursors{})
	require.NoError(t, err)
	require.False(t, since.valid)

	_, err = newStreamSince(store.StreamCursors{Bounds: []string{"10:x:"}})
	require.ErrorContains(t, err, `"10:x:" is not a snapshot`)
}
