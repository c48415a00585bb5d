package main

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/admin"
)

// eventStatus is the backlog of one queue and event name in `bunbox status`.
type eventStatus struct {
	Queue            string  `json:"queue"`
	EventName        string  `json:"event_name"`
	Pending          int64   `json:"pending"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	Dead             int64   `json:"dead"`
}

func readEventStatus(ctx context.Context, ob *admin.Outbox) ([]eventStatus, error) {
	by, err := ob.ReadBacklogByEvent(ctx)
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

// queueStatus is one asynq queue in `bunbox status`: its tasks by state, as asynq's Inspector reads them
// from Redis. Retry and Archived are the handlers' failures (retrying, given up), which the outbox's dead
// count does not see.
type queueStatus struct {
	Queue     string `json:"queue"`
	Pending   int    `json:"pending"`
	Active    int    `json:"active"`
	Scheduled int    `json:"scheduled"`
	Retry     int    `json:"retry"`
	Archived  int    `json:"archived"`
	Completed int    `json:"completed"`
	Paused    bool   `json:"paused"`
}

// readQueues fills rep.Queues from Redis, or rep.QueuesError, and returns that error.
func (c *cli) readQueues(ctx context.Context, rep *statusReport) error {
	rep.Queues = []queueStatus{}
	err := c.inspectQueues(ctx, rep)
	if err != nil {
		rep.QueuesError = err.Error()
	}
	return err
}

func (c *cli) inspectQueues(ctx context.Context, rep *statusReport) error {
	opt, redisName, err := c.redis()
	if err != nil {
		return err
	}
	ins := asynq.NewInspector(opt)
	defer ins.Close()
	// The Inspector takes no context: read in the background and give up when ctx is done.
	type result struct {
		queues []queueStatus
		err    error
	}
	done := make(chan result, 1)
	go func() {
		names, err := ins.Queues()
		if err != nil {
			done <- result{err: err}
			return
		}
		sort.Strings(names)
		qs := make([]queueStatus, 0, len(names))
		for _, name := range names {
			info, err := ins.GetQueueInfo(name)
			if err != nil {
				done <- result{err: fmt.Errorf("queue %s: %w", name, err)}
				return
			}
			qs = append(qs, queueStatus{Queue: name, Pending: info.Pending, Active: info.Active, Scheduled: info.Scheduled,
				Retry: info.Retry, Archived: info.Archived, Completed: info.Completed, Paused: info.Paused})
		}
		done <- result{queues: qs}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return fmt.Errorf("read asynq's queues (Redis at %s): %w", redisName, res.err)
		}
		rep.Queues = res.queues
		return nil
	case <-ctx.Done():
		return fmt.Errorf("read asynq's queues (Redis at %s): %w", redisName, ctx.Err())
	}
}

// printQueues prints asynq's queues, or says there are none.
func (c *cli) printQueues(queues []queueStatus) error {
	fmt.Fprintln(c.stdout)
	if len(queues) == 0 {
		fmt.Fprintln(c.stdout, "asynq has no queue yet")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ASYNQ QUEUE\tPENDING\tACTIVE\tSCHEDULED\tRETRY\tARCHIVED\tCOMPLETED")
	for _, q := range queues {
		name := q.Queue
		if q.Paused {
			name += " (paused)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", name, q.Pending, q.Active, q.Scheduled, q.Retry, q.Archived, q.Completed)
	}
	return tw.Flush()
}
