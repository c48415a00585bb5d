// Package asynqtasks lists, runs and deletes the tasks of bunbox's events that asynq gave up on
// (archived) or is retrying, through asynq's Inspector: the handlers' failures, which the outbox's dead
// rows do not see. `bunbox tasks` uses it, and the page can offer the same actions.
//
// Only bunbox's tasks are touched: those whose bunbox-event-id header (wire.HeaderEventID) holds a
// UUID equal to the task's id, or, for a listener's task of fanout.Routes, to the id without its
// ":<listener>" suffix (wire.HeaderListener). Tasks other code enqueued in the same queues are left as
// they are, whatever the filter.
package asynqtasks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/wire"
)

// Filter selects bunbox's failed tasks. EventIDs, Names and TaskIDs combine with AND; a filter that sets none of
// them selects nothing and is an error, unless All is set, so that a forgotten flag never touches every
// task.
type Filter struct {
	// EventIDs selects the tasks of these events (every listener's, with fanout.Routes).
	EventIDs []uuid.UUID
	// Names selects the tasks of the events of these names.
	Names []string
	// TaskIDs selects these tasks by asynq task id (the page's selection of single tasks).
	TaskIDs []string
	// All selects every failed task of bunbox's when no other field is set.
	All bool
	// States selects archived, retry or both (nil: both).
	States []asynq.TaskState
}

// ErrEmptyFilter is returned for a Filter that selects nothing and does not set All.
var ErrEmptyFilter = errors.New("task filter is empty: give event ids or names, or set All")

// Task is one failed task of a bunbox event.
type Task struct {
	Queue     string
	ID        string // the asynq task id: the event id, or "<event id>:<listener>"
	Type      string
	EventID   uuid.UUID
	EventName string
	Listener  string // the listener of a fanned-out task (fanout.Routes); "" otherwise
	State     asynq.TaskState
	Retried   int
	MaxRetry  int
	LastErr   string
	// LastFailedAt is when its handler last failed; NextProcessAt when asynq runs a retry task next.
	LastFailedAt  time.Time
	NextProcessAt time.Time
}

// pageSize is how many tasks one Inspector call lists.
const pageSize = 500

// states are the states of the failed tasks, in the order they are listed.
var states = []asynq.TaskState{asynq.TaskStateArchived, asynq.TaskStateRetry}

func (f Filter) check() error {
	if len(f.EventIDs) == 0 && len(f.Names) == 0 && len(f.TaskIDs) == 0 && !f.All {
		return ErrEmptyFilter
	}
	for _, s := range f.States {
		if !slices.Contains(states, s) {
			return fmt.Errorf("task state %s: want archived or retry", s)
		}
	}
	return nil
}

func (f Filter) matches(t Task) bool {
	if len(f.EventIDs) > 0 && !slices.Contains(f.EventIDs, t.EventID) {
		return false
	}
	if len(f.TaskIDs) > 0 && !slices.Contains(f.TaskIDs, t.ID) {
		return false
	}
	return len(f.Names) == 0 || slices.Contains(f.Names, t.EventName)
}

// Of returns the Task of info when it is a task of a bunbox event (see the package doc).
func Of(info *asynq.TaskInfo) (Task, bool) { return bunboxTask(info) }

// bunboxTask returns the Task of info when it is a task of a bunbox event (see the package doc).
func bunboxTask(info *asynq.TaskInfo) (Task, bool) {
	raw, ok := info.Headers[wire.HeaderEventID]
	if !ok {
		return Task{}, false
	}
	id, err := uuid.Parse(raw)
	if err != nil || id == uuid.Nil {
		return Task{}, false
	}
	listener := info.Headers[wire.HeaderListener]
	switch {
	case listener == "" && info.ID == id.String():
	case listener != "" && info.ID == id.String()+":"+listener:
	default:
		return Task{}, false
	}
	name := info.Headers[wire.HeaderEventName]
	if name == "" {
		name = info.Type
	}
	return Task{Queue: info.Queue, ID: info.ID, Type: info.Type, EventID: id, EventName: name, Listener: listener,
		State: info.State, Retried: info.Retried, MaxRetry: info.MaxRetry, LastErr: info.LastErr,
		LastFailedAt: info.LastFailedAt, NextProcessAt: info.NextProcessAt}, true
}

// List returns up to limit (<= 0: all) failed tasks f selects: by queue, archived before retry, most
// recently failed first.
func List(ctx context.Context, ins *asynq.Inspector, f Filter, limit int) ([]Task, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	queues, err := ins.Queues()
	if err != nil {
		return nil, fmt.Errorf("list asynq's queues: %w", err)
	}
	sort.Strings(queues)
	want := f.States
	if len(want) == 0 {
		want = states
	}
	var out []Task
	for _, q := range queues {
		for _, st := range states {
			if !slices.Contains(want, st) {
				continue
			}
			list := ins.ListArchivedTasks
			if st == asynq.TaskStateRetry {
				list = ins.ListRetryTasks
			}
			var found []Task
			for page := 1; ; page++ {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				infos, err := list(q, asynq.Page(page), asynq.PageSize(pageSize))
				if err != nil {
					if errors.Is(err, asynq.ErrQueueNotFound) {
						break
					}
					return nil, fmt.Errorf("list the %s tasks of queue %s: %w", st, q, err)
				}
				for _, info := range infos {
					if t, ok := bunboxTask(info); ok && f.matches(t) {
						found = append(found, t)
					}
				}
				if len(infos) < pageSize {
					break
				}
			}
			sort.SliceStable(found, func(i, j int) bool { return found[i].LastFailedAt.After(found[j].LastFailedAt) })
			out = append(out, found...)
			if limit > 0 && len(out) >= limit {
				return out[:limit], nil
			}
		}
	}
	return out, nil
}

// Outcome is what Run or Delete did.
type Outcome struct {
	// Done counts the tasks run or deleted.
	Done int
	// Gone counts the tasks that left their state between the listing and the action (a retry that ran,
	// an operator or a worker quicker): nothing was done to them.
	Gone int
}

// Run puts the failed tasks f selects back in their queue's pending list: asynq runs them next, with
// their retry count kept.
func Run(ctx context.Context, ins *asynq.Inspector, f Filter) (Outcome, error) {
	return act(ctx, ins, f, ins.RunTask, "run")
}

// Delete deletes the failed tasks f selects from asynq, for good. The event's row in the outbox is not
// touched: a keyed event (model.WithOrderingKey) whose task is deleted keeps its key blocked until the
// row is retried or purged (`bunbox dead`).
func Delete(ctx context.Context, ins *asynq.Inspector, f Filter) (Outcome, error) {
	return act(ctx, ins, f, ins.DeleteTask, "delete")
}

func act(ctx context.Context, ins *asynq.Inspector, f Filter, do func(queue, id string) error, what string) (Outcome, error) {
	tasks, err := List(ctx, ins, f, 0)
	if err != nil {
		return Outcome{}, err
	}
	var o Outcome
	for _, t := range tasks {
		if err := ctx.Err(); err != nil {
			return o, err
		}
		// Look again just before: the task may have run or moved since the listing, and a task id of
		// bunbox's must still hold a task of bunbox's in a failed state.
		info, err := ins.GetTaskInfo(t.Queue, t.ID)
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			o.Gone++
			continue
		}
		if err != nil {
			return o, fmt.Errorf("%s task %s of queue %s: %w", what, t.ID, t.Queue, err)
		}
		if _, ok := bunboxTask(info); !ok || !slices.Contains(states, info.State) {
			o.Gone++
			continue
		}
		switch err := do(t.Queue, t.ID); {
		case err == nil:
			o.Done++
		case errors.Is(err, asynq.ErrTaskNotFound):
			o.Gone++
		default:
			return o, fmt.Errorf("%s task %s of queue %s: %w", what, t.ID, t.Queue, err)
		}
	}
	return o, nil
}
