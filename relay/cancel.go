package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
)

// The outcomes of a cancel, kept in the row's cancel_result column (bunx.Outbox.Cancel writes the first).
const (
	// cancelNeverPublished: the event was cancelled before the relay published it; it is never delivered.
	cancelNeverPublished = "never published"
	// cancelRemoved: the relay deleted the event's tasks from asynq (pending, scheduled, retry, archived or
	// aggregating) before they ran.
	cancelRemoved = "removed from asynq"
	// cancelGone: asynq no longer held the event's tasks: they had completed and asynq dropped them after
	// their retention, or Redis lost them. Nothing was taken back, and the reconciler does not bring them back.
	cancelGone = "gone from asynq"
	// cancelRan: a task of the event had completed before the cancel reached asynq: it could not be taken back.
	cancelRan = "ran before the cancel"
	// cancelRunning: a task of the event was running when the relay looked; the relay looks again until it
	// has completed (cancelRan) or waits for a retry (then it is deleted: cancelRemoved).
	cancelRunning = "running, could not be taken back yet"
)

// cancelPageSize is how many cancelled rows one pass of the cancel loop locks at a time.
const cancelPageSize = 100

// cancelDueSQL reports whether cancelled rows wait for the relay: one probe of outbox_events_cancelling_idx.
const cancelDueSQL = `SELECT EXISTS (SELECT 1 FROM outbox_events WHERE cancelled_at IS NOT NULL AND cancel_settled_at IS NULL)`

// cancelLoop takes the tasks of cancelled events back out of asynq (cancelOnce) every
// CancelCheckInterval, backing off while it finds only tasks that are running, and deletes the cancelled
// rows PublishedRetention after their cancel, every CleanupInterval. A pass that released ordering keys
// wakes the relay's loop.
func (r *Relay) cancelLoop(ctx context.Context, wake chan<- struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	lastCleanup := time.Time{}
	failures, idle := 0, 0
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if r.cfg.PublishedRetention > 0 && time.Since(lastCleanup) >= r.cfg.CleanupInterval {
			lastCleanup = time.Now()
			if _, err := r.cleanupCancelled(ctx); err != nil && ctx.Err() == nil {
				r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: deleting cancelled rows failed", slog.Any("err", err))
			}
		}
		wait := r.cfg.CancelCheckInterval
		var due bool
		if err := r.db.NewRaw(r.names.SQL(cancelDueSQL)).Scan(ctx, &due); err != nil || !due {
			timer.Reset(wait)
			continue
		}
		if r.keys == nil {
			if !warned {
				warned = true
				r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: cancelled events may still wait in asynq, but this relay "+
					"cannot take them out: give relay.New the Redis options or Config.Inspector")
			}
			timer.Reset(r.cfg.PollInterval)
			continue
		}
		res, err := r.cancelOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			failures++
			wait = r.cfg.roundBackoff(failures)
			r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: taking cancelled events out of asynq failed, backing off",
				slog.Int("attempt", failures), slog.Duration("delay", wait), slog.Any("err", err))
		case res.Settled == 0:
			failures = 0
			idle++ // only running tasks: look less often
			wait = min(r.cfg.CancelCheckInterval<<min(idle, 6), max(r.cfg.PollInterval, r.cfg.CancelCheckInterval))
		default:
			failures, idle = 0, 0
		}
		if res.Keys > 0 {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// cancelResult describes one pass of cancelOnce.
type cancelResult struct {
	Checked int // cancelled rows looked at
	Settled int // of them, done with: nothing left to take back
	Removed int // tasks deleted from asynq
	Keys    int // ordering keys released
}

// cancelOnce makes one pass over the cancelled rows whose tasks may still be in asynq, a page at a time.
func (r *Relay) cancelOnce(ctx context.Context) (cancelResult, error) {
	var res cancelResult
	var after int64
	for ctx.Err() == nil {
		n, last, err := r.cancelPage(ctx, after, &res)
		if err != nil || n < cancelPageSize {
			return res, err
		}
		after = last
	}
	return res, nil
}

// cancelPageSQL locks a page of the cancelled rows not yet settled, after an id. Streamed rows that the
// stream has not passed are in none of its pages (see cancelPageStreamed).
const cancelPageSQL = `SELECT id, event_id, event_name, queue, coalesce(ordering_key, ''),
  published_at IS NOT NULL, coalesce(cancel_result, '')
FROM outbox_events e
WHERE cancelled_at IS NOT NULL AND cancel_settled_at IS NULL AND id > ?%s
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// cancelPageStreamed keeps out of a cancel page the streamed rows the stream has not passed: a stream
// round may be enqueueing one right now, so that looking for its tasks could find none before the task
// arrives. The stream settles the cancel of a row it finds cancelled as it passes it, in the round that
// moves the cursor past it (cancelNeverPublished: it was never enqueued, see streamRound). A row still
// unsettled once the cursor is past it was enqueued before its cancel committed: the round that passed it
// has committed, its tasks are in asynq, and the page takes them back as a published row's.
var cancelPageStreamed = fmt.Sprintf(cancelPageSQL, `
  AND (e.published_at IS DISTINCT FROM `+streamsql.Sentinel+` OR EXISTS (SELECT 1 FROM bunbox_stream s
    WHERE s.name = 'outbox' AND `+streamsql.Delivered+`))`)

// cancelPageSQL is the cancel page's statement: with cancelPageStreamed's filter wherever the cursor's
// table exists, as it is before the migration otherwise.
func (r *Relay) cancelPageSQL(ctx context.Context) string {
	if _, cursor := r.rounds.stream.catalog(ctx); cursor {
		return cancelPageStreamed
	}
	return fmt.Sprintf(cancelPageSQL, "")
}

// cancelRow is the part of a cancelled row that the cancel pass needs.
type cancelRow struct {
	ID        int64
	EventID   uuid.UUID
	Name      string
	Queue     string
	Key       string
	Published bool
	Result    string
}

// cancelPage locks a page of the cancelled rows not yet settled, takes their tasks out of asynq and
// records the outcome. The lock keeps the key tracker and other relays off the rows meanwhile.
func (r *Relay) cancelPage(ctx context.Context, after int64, res *cancelResult) (n int, last int64, err error) {
	bg := context.WithoutCancel(ctx) // what was deleted from asynq is recorded
	tx, err := r.db.BeginTx(bg, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, r.names.SQL(r.cancelPageSQL(ctx)), after, cancelPageSize)
	if err != nil {
		return 0, 0, fmt.Errorf("read cancelled rows: %w", err)
	}
	var page []cancelRow
	for rows.Next() {
		var row cancelRow
		if err := rows.Scan(&row.ID, &row.EventID, &row.Name, &row.Queue, &row.Key, &row.Published, &row.Result); err != nil {
			rows.Close()
			return 0, 0, err
		}
		page = append(page, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	if len(page) == 0 {
		return 0, 0, nil
	}
	res.Checked += len(page)
	ids := make([]int64, len(page))
	results := make([]string, len(page))
	settled := make([]bool, len(page))
	removed := make([]int, len(page))
	for i := range page {
		ids[i] = page[i].ID
		results[i], removed[i], err = r.takeBack(&page[i])
		if err != nil {
			return 0, 0, err // the tasks deleted so far are looked up again by the next pass: then missing
		}
		settled[i] = results[i] != cancelRunning
	}
	if _, err := tx.NewRaw(r.names.SQL(`UPDATE outbox_events AS o SET cancel_result = u.result,
  cancel_settled_at = CASE WHEN u.settled THEN now() END,
  completed_at = CASE WHEN u.settled AND o.ordering_key IS NOT NULL THEN coalesce(o.completed_at, now()) ELSE o.completed_at END
FROM unnest(?::bigint[], ?::text[], ?::boolean[]) AS u(id, result, settled)
WHERE o.id = u.id`), pgdialect.Array(ids), pgdialect.Array(results), pgdialect.Array(settled)).Exec(bg); err != nil {
		return 0, 0, fmt.Errorf("record cancels: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	for i := range page {
		row := &page[i]
		res.Removed += removed[i]
		if settled[i] {
			res.Settled++
			if row.Key != "" {
				res.Keys++
			}
		}
		level := slog.LevelInfo
		if results[i] == cancelRan || results[i] == cancelRunning {
			if row.Result == results[i] {
				continue // said already
			}
			level = slog.LevelWarn
		}
		r.log.LogAttrs(bg, level, "bunbox relay: cancelled event: "+results[i],
			slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()),
			slog.String("task_type", row.Name), slog.String("queue", row.Queue), slog.Int("tasks_removed", removed[i]))
	}
	return len(page), page[len(page)-1].ID, nil
}

// takeBack deletes from asynq the tasks of a cancelled row that have not run and says what it found: the
// row's outcome and how many tasks it deleted. A running task outweighs one that ran, which outweighs
// one deleted, which outweighs one gone. An error that leaves a task's state unknown aborts the pass.
func (r *Relay) takeBack(row *cancelRow) (result string, removed int, err error) {
	if !row.Published {
		return cancelGone, 0, nil // put back in line after the cancel, because its task was missing
	}
	var running, ran, gone int
	for _, id := range taskIDs(r.cfg.Routes, row.EventID, row.Name) {
		info, err := r.keys.lookUp(row.Queue, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			gone++
			continue
		case err != nil:
			return "", removed, fmt.Errorf("look up task %s in queue %q: %w", id, row.Queue, err)
		}
		switch info.State {
		case asynq.TaskStateActive:
			running++
			continue
		case asynq.TaskStateCompleted:
			ran++
			continue
		}
		err = r.keys.ins.DeleteTask(row.Queue, id)
		switch {
		case err == nil:
			removed++
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			gone++
		case strings.Contains(err.Error(), "active state"): // a worker took it meanwhile
			running++
		default:
			return "", removed, fmt.Errorf("delete task %s from queue %q: %w", id, row.Queue, err)
		}
	}
	switch {
	case running > 0:
		return cancelRunning, removed, nil
	case ran > 0:
		return cancelRan, removed, nil
	case removed > 0:
		return cancelRemoved, removed, nil
	}
	return cancelGone, removed, nil
}

// cleanupCancelled deletes the settled cancelled rows cancelled more than PublishedRetention ago,
// CleanupBatchSize per statement, and returns how many it deleted.
func (r *Relay) cleanupCancelled(ctx context.Context) (int64, error) {
	cutoff := r.cfg.now().Add(-r.cfg.PublishedRetention)
	var total int64
	for ctx.Err() == nil {
		res, err := r.db.NewRaw(r.names.SQL(`DELETE FROM outbox_events WHERE id IN (
  SELECT id FROM outbox_events WHERE cancelled_at < ? AND cancel_settled_at IS NOT NULL
  ORDER BY cancelled_at LIMIT ? FOR UPDATE SKIP LOCKED)`), cutoff, r.cfg.CleanupBatchSize).Exec(ctx)
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += n
		r.counters.cleaned.Add(n)
		if n < int64(r.cfg.CleanupBatchSize) {
			break
		}
	}
	if total > 0 {
		r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: deleted cancelled rows past retention",
			slog.Int64("rows", total), slog.Duration("retention", r.cfg.PublishedRetention))
	}
	return total, nil
}
