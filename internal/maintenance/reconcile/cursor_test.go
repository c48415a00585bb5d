package reconcile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
