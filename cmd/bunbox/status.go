package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/bunbox/bunbox/admin"
	"github.com/uptrace/bun"
)

// eventStatus is the backlog of one queue and event name in `bunbox status`.
type eventStatus struct {
	Queue            string  `json:"queue"`
	EventName        string  `json:"event_name"`
	Pending          int64   `json:"pending"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	Dead             int64   `json:"dead"`
}

func readEventStatus(ctx context.Context, db bun.IDB) ([]eventStatus, error) {
	by, err := admin.ReadBacklogByEvent(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read backlog by event: %w", err)
	}
	out := make([]eventStatus, len(by))
	for i, b := range by {
		out[i] = eventStatus{Queue: b.Queue, EventName: b.EventName, Pending: b.Pending, OldestPendingAge: b.Lag.Seconds(), Dead: b.Dead}
	}
	return out, nil
}

// printEventStatus prints the table of the queues and event names with pending or dead rows.
func (c *cli) printEventStatus(events []eventStatus) error {
	if len(events) == 0 {
		return nil
	}
	fmt.Fprintln(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tEVENT\tPENDING\tOLDEST PENDING\tDEAD")
	for _, e := range events {
		age := formatAge(time.Duration(e.OldestPendingAge * float64(time.Second)))
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\n", e.Queue, e.EventName, e.Pending, age, e.Dead)
	}
	return tw.Flush()
}
