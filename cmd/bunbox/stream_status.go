package main

import (
	"fmt"
	"io"
	"time"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/internal/streamsql"
)

// publishedCountSQL counts the published rows: those the per-row path marked, and the streamed rows the
// snapshot cursor has delivered (a waiting streamed row is pending, see admin.Outbox.ReadBacklog).
const publishedCountSQL = `SELECT count(*) FROM outbox_events e ` + streamsql.Cursor + `
WHERE e.published_at IS NOT NULL AND (e.published_at <> 'infinity' OR ` + streamsql.Delivered + `)`

// streamStatus is the snapshot cursor's part of `bunbox status`.
type streamStatus struct {
	On bool `json:"on"`
	// Waiting counts the streamed rows the cursor has not delivered yet (they count as pending too).
	Waiting          int64   `json:"waiting"`
	OldestWaitingAge float64 `json:"oldest_waiting_age_seconds"`
	// WaitsForXID is the oldest transaction whose rows wait; "" when none waits.
	WaitsForXID string `json:"waits_for_xid,omitempty"`
	// MovedAgo is how long ago a relay last moved the cursor, in seconds; absent when never on.
	MovedAgo *float64 `json:"cursor_moved_seconds_ago,omitempty"`
}

func newStreamStatus(st admin.StreamState) streamStatus {
	out := streamStatus{On: st.On, Waiting: st.Waiting, OldestWaitingAge: st.OldestWaiting.Seconds(), WaitsForXID: st.WaitsForXID}
	if st.Cursor {
		moved := st.SinceMoved.Seconds()
		out.MovedAgo = &moved
	}
	return out
}

// printStreamStatus writes the stream's lines of `bunbox status` into a tabwriter: off, or how far behind
// the cursor is.
func printStreamStatus(w io.Writer, st admin.StreamState) {
	switch {
	case !st.On && !st.Cursor:
		fmt.Fprintf(w, "stream\toff\n")
		return
	case st.On:
		fmt.Fprintf(w, "stream\ton (cursor moved %s ago)\n", formatAgo(st.SinceMoved))
	default:
		fmt.Fprintf(w, "stream\toff (turned off; cursor moved %s ago)\n", formatAgo(st.SinceMoved))
	}
	fmt.Fprintf(w, "  waiting\t%d\n", st.Waiting)
	fmt.Fprintf(w, "  oldest waiting\t%s\n", formatAge(st.OldestWaiting))
	if st.WaitsForXID != "" {
		fmt.Fprintf(w, "  waits for xid\t%s (the oldest transaction whose rows wait)\n", st.WaitsForXID)
	}
}

// formatAgo is formatAge for a time that may be now.
func formatAgo(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return formatAge(d)
}
