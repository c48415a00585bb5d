package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
)

// The cancel's statements: a cancelled row whose tasks may still be in asynq is settled.

// The outcomes of a cancel, kept in the row's cancel_result column (bunx.Outbox.Cancel writes the first).
const (
	// CancelNeverPublished: the event was cancelled before the relay published it; it is never delivered.
	CancelNeverPublished = "never published"
	// CancelRemoved: the relay deleted the event's tasks from asynq (pending, scheduled, retry, archived or
	// aggregating) before they ran.
	CancelRemoved = "removed from asynq"
	// CancelGone: asynq no longer held the event's tasks: they had completed and asynq dropped them after
	// their retention, or Redis lost them. Nothing was taken back, and the reconciler does not bring them back.
	CancelGone = "gone from asynq"
	// CancelRan: a task of the event had completed before the cancel reached asynq: it could not be taken back.
	CancelRan = "ran before the cancel"
	// CancelRunning: a task of the event was running when the relay looked; the relay looks again until it
	// has completed (CancelRan) or waits for a retry (then it is deleted: CancelRemoved).
	CancelRunning = "running, could not be taken back yet"
)

// CancelDue reports whether cancelled rows wait for the relay: one probe of outbox_events_cancelling_idx.
func CancelDue(ctx context.Context, db bun.IDB, names tables.Names) (bool, error) {
	var due bool
	err := db.NewRaw(names.SQL(`SELECT EXISTS (SELECT 1 FROM outbox_events WHERE cancelled_at IS NOT NULL AND cancel_settled_at IS NULL)`)).
		Scan(ctx, &due)
	return due, err
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
// moves the cursor past it (CancelNeverPublished: it was never enqueued). A row still unsettled once the
// cursor is past it was enqueued before its cancel committed: the round that passed it has committed, its
// tasks are in asynq, and the page takes them back as a published row's.
var cancelPageStreamed = fmt.Sprintf(cancelPageSQL, `
  AND (e.published_at IS DISTINCT FROM `+streamsql.Sentinel+` OR `+streamsql.IsDelivered+`)`)

// CancelRow is the part of a cancelled row that the cancel pass needs.
type CancelRow struct {
	ID        int64
	EventID   uuid.UUID
	Name      string
	Queue     string
	Key       string
	Published bool
	Result    string // the cancel_result recorded so far
}

// LockCancelled locks (SKIP LOCKED) up to limit cancelled rows not yet settled after id after, in id
// order. With cursor (the stream's cursor table exists), the streamed rows the stream has not passed are
// left out (cancelPageStreamed).
func LockCancelled(ctx context.Context, tx bun.Tx, names tables.Names, after int64, limit int, cursor bool) ([]CancelRow, error) {
	q := fmt.Sprintf(cancelPageSQL, "")
	if cursor {
		q = cancelPageStreamed
	}
	rows, err := tx.QueryContext(ctx, names.SQL(q), after, limit)
	if err != nil {
		return nil, fmt.Errorf("read cancelled rows: %w", err)
	}
	defer rows.Close()
	var page []CancelRow
	for rows.Next() {
		var row CancelRow
		if err := rows.Scan(&row.ID, &row.EventID, &row.Name, &row.Queue, &row.Key, &row.Published, &row.Result); err != nil {
			return nil, err
		}
		page = append(page, row)
	}
	return page, rows.Err()
}

// RecordCancels records the outcome of each cancelled row ids[i]: results[i] in cancel_result and, when
// settled[i], the settle time, and the completion of a keyed row (its key moves on).
func RecordCancels(ctx context.Context, db bun.IDB, names tables.Names, ids []int64, results []string, settled []bool) error {
	_, err := db.NewRaw(names.SQL(`UPDATE outbox_events AS o SET cancel_result = u.result,
  cancel_settled_at = CASE WHEN u.settled THEN now() END,
  completed_at = CASE WHEN u.settled AND o.ordering_key IS NOT NULL THEN coalesce(o.completed_at, now()) ELSE o.completed_at END
FROM unnest(?::bigint[], ?::text[], ?::boolean[]) AS u(id, result, settled)
WHERE o.id = u.id`), pgdialect.Array(ids), pgdialect.Array(results), pgdialect.Array(settled)).Exec(ctx)
	return err
}
