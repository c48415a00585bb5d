package relay

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/internal/streamsql"
)

// The cancel of a streamed row (bunx.Outbox.Cancel). bunx cannot tell a streamed row the stream has
// delivered from one still waiting (published_at is 'infinity' for both), so it leaves the cancel of
// either to the relay, as for a published row. A waiting row is never enqueued after its cancel commits:
// the stream's read skips cancelled rows. But a stream round that read it just before may be enqueueing it,
// so the relay settles the cancel only while it holds the cursor row (FOR SHARE: no stream round under
// way): a row the cursor has not passed then was never enqueued and never will be (CancelNeverPublished);
// one it has passed is taken back from asynq by the cancel pages (cancel.go), as a published row.

// streamCancelDueSQL reports whether cancels of streamed rows wait to be settled.
const streamCancelDueSQL = `SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE cancelled_at IS NOT NULL AND cancel_settled_at IS NULL AND published_at = ` + streamsql.Sentinel + `)`

// settleStreamCancelsSQL settles the cancels of the streamed rows the cursor has not passed, as bunx's
// cancel settles a pending row's: never published, and a keyed one completed so that it does not hold its
// key. Argument: the result (CancelNeverPublished).
const settleStreamCancelsSQL = `UPDATE outbox_events AS o SET cancel_settled_at = now(), cancel_result = ?,
  completed_at = CASE WHEN o.ordering_key IS NOT NULL THEN coalesce(o.completed_at, now()) ELSE o.completed_at END
WHERE o.id IN (SELECT e.id FROM outbox_events e ` + streamsql.Cursor + `
  WHERE e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL AND ` + streamsql.Waiting + `)
RETURNING o.id, o.event_id, o.event_name, o.queue, o.ordering_key IS NOT NULL`

// settleStreamCancels settles the cancels of the streamed rows the stream has not delivered (see above),
// counting them in res.
func (r *Relay) settleStreamCancels(ctx context.Context, res *cancelResult) error {
	if _, cursor := r.streamCatalog(ctx); !cursor {
		return nil
	}
	var due bool
	if err := r.db.NewRaw(r.names.SQL(streamCancelDueSQL)).Scan(ctx, &due); err != nil || !due {
		return err
	}
	tx, err := r.begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// Waits for the stream round under way, if any, and keeps the next one off until the commit.
	if _, err := tx.ExecContext(ctx, r.names.SQL(`SELECT 1 FROM bunbox_stream WHERE name = 'outbox' FOR SHARE`)); err != nil {
		return fmt.Errorf("lock the stream's cursor: %w", err)
	}
	rows, err := tx.QueryContext(ctx, r.names.SQL(settleStreamCancelsSQL), CancelNeverPublished)
	if err != nil {
		return fmt.Errorf("settle the cancels of streamed rows: %w", err)
	}
	type settled struct {
		id          int64
		eventID     uuid.UUID
		name, queue string
		keyed       bool
	}
	var done []settled
	for rows.Next() {
		var s settled
		if err := rows.Scan(&s.id, &s.eventID, &s.name, &s.queue, &s.keyed); err != nil {
			rows.Close()
			return err
		}
		done = append(done, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(done) == 0 {
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for _, s := range done {
		res.Checked++
		res.Settled++
		if s.keyed {
			res.Keys++
		}
		r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: cancelled event: "+CancelNeverPublished,
			slog.Int64("outbox_id", s.id), slog.String("event_id", s.eventID.String()),
			slog.String("task_type", s.name), slog.String("queue", s.queue), slog.Int("tasks_removed", 0))
	}
	return nil
}
