package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/asynqtasks"
)

// tasks lists, runs or deletes the archived and retry tasks of bunbox's events in asynq.
func (c *cli) tasks(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError(c.stderr, "tasks needs list, run or delete")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list", "run", "delete":
	default:
		return usageError(c.stderr, "unknown tasks command %q (want list, run or delete)", sub)
	}
	fs := flag.NewFlagSet("bunbox tasks "+sub, flag.ContinueOnError)
	var names namesFlag
	fs.Var(&names, "name", "the tasks of the events of this name (repeatable)")
	all := fs.Bool("all", false, "every archived and retry task of bunbox's events")
	state := fs.String("state", "", "archived or retry (default: both)")
	var limit *int
	var asJSON, yes *bool
	switch sub {
	case "list":
		limit = fs.Int("limit", 100, "how many tasks to list")
		asJSON = fs.Bool("json", false, "print JSON")
	case "delete":
		yes = fs.Bool("yes", false, "confirm: delete the tasks from asynq for good")
	}
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	f := asynqtasks.Filter{Names: names, All: *all}
	switch *state {
	case "":
	case "archived":
		f.States = []asynq.TaskState{asynq.TaskStateArchived}
	case "retry":
		f.States = []asynq.TaskState{asynq.TaskStateRetry}
	default:
		return usageError(c.stderr, "-state is %q: want archived or retry", *state)
	}
	switch {
	case *all && (len(names) > 0 || len(rest) > 0):
		return usageError(c.stderr, "tasks %s takes event ids and/or -name, or -all", sub)
	case !*all && len(names) == 0 && len(rest) == 0 && sub == "list":
		f.All = true // list shows everything by default
	case !*all && len(names) == 0 && len(rest) == 0:
		return usageError(c.stderr, "tasks %s needs event ids, -name NAME or -all", sub)
	}
	for _, a := range rest {
		id, err := uuid.Parse(a)
		if err != nil {
			return usageError(c.stderr, "%q is not an event id (a UUID)", a)
		}
		f.EventIDs = append(f.EventIDs, id)
	}
	if limit != nil && *limit < 1 {
		return usageError(c.stderr, "-limit must be positive")
	}
	opt, redisName, err := c.redis()
	if err != nil {
		return err
	}
	ins := asynq.NewInspector(opt)
	defer ins.Close()
	wrap := func(err error) error { return fmt.Errorf("tasks %s (Redis at %s): %w", sub, redisName, err) }

	switch sub {
	case "list":
		tasks, err := asynqtasks.List(ctx, ins, f, *limit)
		if err != nil {
			return wrap(err)
		}
		if *asJSON {
			err = c.printJSON(tasksJSON(tasks))
		} else {
			err = c.printTasks(tasks)
		}
		return errors.Join(err, c.missingTasks(f, tasks))
	case "delete":
		if !*yes {
			tasks, err := asynqtasks.List(ctx, ins, f, 0)
			if err != nil {
				return wrap(err)
			}
			return usageError(c.stderr, "tasks delete would delete %s from asynq for good: add -yes to confirm",
				plural(int64(len(tasks)), "task", "tasks"))
		}
	}
	var listed []asynqtasks.Task
	if len(f.EventIDs) > 0 {
		if listed, err = asynqtasks.List(ctx, ins, f, 0); err != nil {
			return wrap(err)
		}
	}
	act, done := asynqtasks.Run, "put back in line (asynq runs them next)"
	if sub == "delete" {
		act, done = asynqtasks.Delete, "deleted from asynq"
	}
	o, err := act(ctx, ins, f)
	if err != nil {
		return wrap(err)
	}
	fmt.Fprintf(c.stdout, "%s %s\n", plural(int64(o.Done), "task", "tasks"), done)
	if o.Gone > 0 {
		fmt.Fprintf(c.stderr, "bunbox: %s left the archived or retry state before it was reached (ran, or was acted on meanwhile)\n",
			plural(int64(o.Gone), "task", "tasks"))
	}
	return c.missingTasks(f, listed)
}

// missingTasks says which of the event ids f names have no failed task, and fails when one has none.
func (c *cli) missingTasks(f asynqtasks.Filter, found []asynqtasks.Task) error {
	has := map[uuid.UUID]bool{}
	for _, t := range found {
		has[t.EventID] = true
	}
	var missing int
	for _, id := range f.EventIDs {
		if !has[id] {
			fmt.Fprintf(c.stderr, "bunbox: %s: no archived or retry task of this event in asynq (`bunbox dead retry %s` says where the event is)\n", id, id)
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("tasks: %d of %d events have no failed task", missing, len(f.EventIDs))
	}
	return nil
}

// taskJSON is one task in `tasks list -json`.
type taskJSON struct {
	Queue         string     `json:"queue"`
	TaskID        string     `json:"task_id"`
	Type          string     `json:"type"`
	EventID       string     `json:"event_id"`
	EventName     string     `json:"event_name"`
	Listener      string     `json:"listener,omitempty"`
	State         string     `json:"state"`
	Retried       int        `json:"retried"`
	MaxRetry      int        `json:"max_retry"`
	LastError     string     `json:"last_error"`
	LastFailedAt  *time.Time `json:"last_failed_at,omitempty"`
	NextProcessAt *time.Time `json:"next_process_at,omitempty"`
}

func tasksJSON(tasks []asynqtasks.Task) []taskJSON {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	out := make([]taskJSON, len(tasks))
	for i, t := range tasks {
		out[i] = taskJSON{Queue: t.Queue, TaskID: t.ID, Type: t.Type, EventID: t.EventID.String(), EventName: t.EventName,
			Listener: t.Listener, State: t.State.String(), Retried: t.Retried, MaxRetry: t.MaxRetry, LastError: t.LastErr,
			LastFailedAt: opt(t.LastFailedAt), NextProcessAt: opt(t.NextProcessAt)}
		if t.State == asynq.TaskStateArchived {
			out[i].NextProcessAt = nil
		}
	}
	return out
}

// printTasks prints the failed tasks as a table.
func (c *cli) printTasks(tasks []asynqtasks.Task) error {
	if len(tasks) == 0 {
		fmt.Fprintln(c.stdout, "no archived or retry tasks of bunbox's events")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSTATE\tTASK ID\tTYPE\tRETRIED\tLAST FAILED\tLAST ERROR")
	for _, t := range tasks {
		failed := "-"
		if !t.LastFailedAt.IsZero() {
			failed = t.LastFailedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", t.Queue, t.State, t.ID, t.Type, t.Retried, t.MaxRetry, failed, oneLine(t.LastErr, 80))
	}
	return tw.Flush()
}
