package keytrack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/taskmap"
)

// The tracker's look-ups in asynq: the states of a page's tasks, a queue Redis forgot registered again,
// and the re-run of an archived task the operator retried.

// lookUpRows looks up every task of the rows, at most Concurrency at once, and returns each row's outcome
// (archived over missing over waiting; completed only when all its tasks are) with, for an archived one,
// the error to record. Any other error aborts: an unanswered look-up never counts as missing.
func (t *Tracker) lookUpRows(ctx context.Context, rows []store.KeyedRow) ([]outcome, []string, error) {
	var lookups []taskmap.Lookup
	for i, row := range rows {
		lookups = taskmap.AppendLookups(lookups, t.cfg.Routes, i, row.EventID, row.Name)
	}
	states := make([]asynq.TaskState, len(lookups)) // 0: missing
	infos := make([]*asynq.TaskInfo, len(lookups))
	errs := make([]error, len(lookups))
	inspect := func(i int) {
		lk := lookups[i]
		info, err := t.GetTaskInfo(rows[lk.Row].Queue, lk.TaskID)
		switch {
		case err == nil:
			states[i], infos[i] = info.State, info
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			states[i] = 0
		default:
			errs[i] = fmt.Errorf("look up task %s in queue %q: %w", lk.TaskID, rows[lk.Row].Queue, err)
		}
	}
	var detail []int // the look-ups that need the Inspector
	if t.cfg.Redis != nil {
		// One pipelined round trip reads the state of every task; only archived ones are inspected
		// further, for their error.
		pipe := t.cfg.Redis.Pipeline()
		cmds := make([]*redis.StringCmd, len(lookups))
		for i, lk := range lookups {
			cmds[i] = pipe.HGet(ctx, taskmap.TaskKey(rows[lk.Row].Queue, lk.TaskID), "state")
		}
		_, _ = pipe.Exec(ctx) // its error is the first command's that failed, Nil included: each is read below
		for i, cmd := range cmds {
			err := cmd.Err()
			switch {
			case errors.Is(err, redis.Nil):
				states[i] = 0 // missing
				continue
			case err != nil:
				// Redis refused or did not answer (a key the ACL forbids, a wrong type, a timeout): an
				// outage of the tracker, never a missing task.
				lk := lookups[i]
				return nil, nil, fmt.Errorf("read the state of task %s in queue %q: %w", lk.TaskID, rows[lk.Row].Queue, err)
			}
			switch v := cmd.Val(); v {
			case "":
				states[i] = 0 // missing
			case "completed":
				states[i] = asynq.TaskStateCompleted
			case "archived":
				detail = append(detail, i)
			default:
				states[i] = asynq.TaskStatePending // pending, active, scheduled, retry, aggregating: waiting
			}
		}
	} else {
		for i := range lookups {
			detail = append(detail, i)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, t.cfg.Concurrency)
	for _, i := range detail {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, nil, ctx.Err()
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			inspect(i)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	outcomes := make([]outcome, len(rows))
	lastErrs := make([]string, len(rows))
	done := make([]int, len(rows))
	want := make([]int, len(rows))
	for i, lk := range lookups {
		want[lk.Row]++
		switch states[i] {
		case asynq.TaskStateCompleted:
			done[lk.Row]++
		case asynq.TaskStateArchived:
			if outcomes[lk.Row] != archived {
				outcomes[lk.Row] = archived
				lastErrs[lk.Row] = fmt.Sprintf("asynq archived task %s after %d retries: %s", lk.TaskID, infos[i].Retried, infos[i].LastErr)
			}
		case 0:
			if outcomes[lk.Row] != archived {
				outcomes[lk.Row] = missing
			}
		}
	}
	for i := range rows {
		if outcomes[i] == waiting && done[i] == want[i] {
			outcomes[i] = completed
		}
	}
	return outcomes, lastErrs, nil
}

// GetTaskInfo is the Inspector's, except that a queue Redis forgot (it lost its data, and asynq registers
// a queue only at a client's first enqueue into it, so the relay's own re-enqueues do not register it
// again) is registered again and the task looked up once more; without RedisOpt to do that, it is missing.
func (t *Tracker) GetTaskInfo(queue, id string) (*asynq.TaskInfo, error) {
	info, err := t.cfg.Inspector.GetTaskInfo(queue, id)
	if !errors.Is(err, asynq.ErrQueueNotFound) || t.cfg.RedisOpt == nil {
		return info, err
	}
	if err := t.register(queue); err != nil {
		return nil, fmt.Errorf("register queue %q again: %w", queue, err)
	}
	return t.cfg.Inspector.GetTaskInfo(queue, id)
}

// DeleteTask is the Inspector's.
func (t *Tracker) DeleteTask(queue, id string) error { return t.cfg.Inspector.DeleteTask(queue, id) }

// registerQueueProbe is the id of the task register enqueues, far in the future, and deletes.
const registerQueueProbe = "bunbox-reconciler-queue-probe"

// register adds queue to the queues asynq's Inspector knows: a fresh client enqueues a probe a century
// ahead, which is deleted at once. At most once a second per queue.
func (t *Tracker) register(queue string) (err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.registered[queue]) < time.Second {
		return nil
	}
	t.registered[queue] = time.Now()
	c, err := newClient(t.cfg.RedisOpt)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Enqueue(asynq.NewTask("bunbox:relay-probe", nil), asynq.Queue(queue), asynq.TaskID(registerQueueProbe),
		asynq.ProcessAt(time.Now().AddDate(100, 0, 0)), asynq.MaxRetry(0))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return err
	}
	if err := t.cfg.Inspector.DeleteTask(queue, registerQueueProbe); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return err
	}
	return nil
}

// newClient is asynq.NewClient, which panics on unusable Redis options, with the panic as an error.
func newClient(opt asynq.RedisConnOpt) (c *asynq.Client, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("relay: unusable Redis options %T: %v", opt, p)
		}
	}()
	return asynq.NewClient(opt), nil
}

// RerunArchived handles a TaskID conflict of a keyed event's task. The task is there; when asynq archived
// it (the operator retried the dead event, see admin.RetryDead), it is deleted and enqueued afresh with
// enq, with its full retry budget. Only the relay that holds the row's claim gets here, so nothing else
// enqueues it meanwhile. A nil Tracker does nothing.
func (t *Tracker) RerunArchived(ctx context.Context, enq Enqueuer, task *asynq.Task, opts []asynq.Option) error {
	if t == nil {
		return nil
	}
	var queue, id string
	for _, o := range opts {
		switch o.Type() {
		case asynq.QueueOpt:
			queue = o.Value().(string)
		case asynq.TaskIDOpt:
			id = o.Value().(string)
		}
	}
	info, err := t.GetTaskInfo(queue, id)
	if err != nil {
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			err = errors.New("the task vanished")
		}
		return fmt.Errorf("task %s conflicts: %w", id, err) // a later round tries again
	}
	if info.State != asynq.TaskStateArchived {
		return nil // already delivered
	}
	if err := t.cfg.Inspector.DeleteTask(queue, id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return fmt.Errorf("delete archived task %s: %w", id, err)
	}
	_, err = enq.EnqueueContext(ctx, task, opts...)
	return err
}
