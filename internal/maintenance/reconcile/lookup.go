package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/taskmap"
)

// taskLookups lists the tasks of rows: one per row, or one per listener of its event with Routes.
func (r *Reconciler) taskLookups(rows []store.ReconcileRow) []taskmap.Lookup {
	lookups := make([]taskmap.Lookup, 0, len(rows))
	for i, row := range rows {
		lookups = taskmap.AppendLookups(lookups, r.cfg.Routes, i, row.EventID, row.Name)
	}
	return lookups
}

// findMissing looks the rows' tasks up and returns the rows of which a task is gone. Any other error
// (Redis unreachable) aborts: an unanswered look-up must never count as missing.
func (r *Reconciler) findMissing(ctx context.Context, res *Result, rows []store.ReconcileRow) ([]store.ReconcileRow, error) {
	gone := make([]bool, len(rows))
	var err error
	if r.cfg.Inspector != nil {
		err = r.inspect(ctx, rows, gone)
	} else {
		err = r.exist(ctx, res, rows, gone)
	}
	var missing []store.ReconcileRow
	for i, row := range rows {
		if gone[i] {
			missing = append(missing, row)
		}
	}
	return missing, err
}

// exist writes the markers of the rows' queues not marked yet in this pass, then looks the tasks up as
// one pipeline of EXISTS on asynq's task keys: one round trip per Redis node. A task key exists while
// asynq has the task in any state (it deletes the key when it drops the task, and lets it expire with a
// completed task's retention).
func (r *Reconciler) exist(ctx context.Context, res *Result, rows []store.ReconcileRow, gone []bool) error {
	queues := make([]string, 0, 1)
	for i := range rows {
		if !slices.Contains(queues, rows[i].Queue) {
			queues = append(queues, rows[i].Queue)
		}
	}
	lost, err := r.writeMarkers(ctx, queues)
	for _, q := range lost { // only a queue forgotten and seen again: sweep it at the next pass
		r.cursor.sweep[q] = true
		res.LostQueues = append(res.LostQueues, q)
	}
	if err != nil {
		return err
	}
	r.cursor.seen(rows)

	lookups := r.taskLookups(rows)
	pipe := r.cfg.Redis.Pipeline()
	cmds := make([]*redis.IntCmd, len(lookups))
	for i, lk := range lookups {
		cmds[i] = pipe.Exists(ctx, taskmap.TaskKey(rows[lk.Row].Queue, lk.TaskID))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("relay: reconciler: look up tasks in Redis: %w", err)
	}
	for i, lk := range lookups {
		if cmds[i].Val() == 0 {
			gone[lk.Row] = true
		}
	}
	return nil
}

// inspect looks the tasks up through Config.Inspector, at most Concurrency at once, and sets
// gone for the rows with a task it does not find (a queue it does not know counts as gone).
func (r *Reconciler) inspect(ctx context.Context, rows []store.ReconcileRow, gone []bool) error {
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	sem := make(chan struct{}, r.cfg.Concurrency)
	for _, lk := range r.taskLookups(rows) {
		if failed() {
			break
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			row := &rows[lk.Row]
			_, err := r.cfg.Inspector.GetTaskInfo(row.Queue, lk.TaskID)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
			case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
				gone[lk.Row] = true
			case firstErr == nil:
				firstErr = fmt.Errorf("relay: reconciler: look up task %s in queue %q: %w", lk.TaskID, row.Queue, err)
			}
		})
	}
	wg.Wait()
	return firstErr
}
