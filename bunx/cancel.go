package bunx

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// ErrUnknownEvent is wrapped by the error of a Cancel that names an event id the outbox does not hold
// (never recorded, or published and then deleted after the relay's PublishedRetention); the error's
// message names the ids.
var ErrUnknownEvent = errors.New("bunx: unknown event id")

// unknownEventError returns the error of a Cancel whose ids the outbox does not hold: ErrUnknownEvent
// naming them.
func unknownEventError(ids []uuid.UUID) error {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return fmt.Errorf("%w %s: no outbox event with this id (never recorded, or deleted after its retention); nothing was cancelled",
		ErrUnknownEvent, strings.Join(s, ", "))
}

// cancelNeverPublished is the cancel_result of an event cancelled before the relay published it: the
// relay's "never published" (bunx does not import the relay).
const cancelNeverPublished = "never published"

// cancelSQL marks the events of its first argument cancelled, unless one of them is unknown: then it
// changes nothing and returns the unknown ids. An event that was never published is done with at once
// (cancel_settled_at), and a keyed one among them completed, so that it does not hold its key; for a
// published one the relay takes its tasks back out of asynq after the commit (relay/cancel.go). An
// event already cancelled is left as it is. A row the relay holds in a round is waited for: the cancel
// then finds it published.
const cancelSQL = `WITH ids AS (SELECT DISTINCT id FROM unnest(?0::uuid[]) AS ids(id)),
unknown AS (SELECT id FROM ids WHERE NOT EXISTS (SELECT 1 FROM outbox_events WHERE event_id = ids.id)),
cancelled AS (
  UPDATE outbox_events SET cancelled_at = now(),
    cancel_settled_at = CASE WHEN published_at IS NULL THEN now() END,
    cancel_result = CASE WHEN published_at IS NULL THEN ?1 END,
    completed_at = CASE WHEN published_at IS NULL AND ordering_key IS NOT NULL THEN coalesce(completed_at, now())
      ELSE completed_at END
  WHERE event_id = ANY(?0::uuid[]) AND cancelled_at IS NULL AND NOT EXISTS (SELECT 1 FROM unknown)
  RETURNING 1
)
SELECT id FROM unknown ORDER BY id`

// Cancel cancels the events with the given ids in db's transaction: once it commits, an event the relay
// has not yet published is never delivered, and the tasks of one it has published are deleted from
// asynq by the relay if asynq still holds them (pending, scheduled, retry, archived) rather than running or
// having run; the reconciler never brings a cancelled event back. A cancel that rolls back changes
// nothing. Cancel does not reach Redis: the relay takes the tasks back and records the outcome in the
// row's cancel_result column ("removed from asynq", "ran before the cancel", ...), logging at Warn the events it found
// had run or were running, which it could not take back.
//
// Atomicity needs a bun.Tx: the cancel then takes effect exactly when the transaction commits. Cancelling
// an event twice is a no-op. An id the outbox does not hold makes Cancel change nothing and return an
// error wrapping ErrUnknownEvent that names it. If the relay is in the middle of
// publishing the event, Cancel waits for that round's transaction to end (milliseconds).
func (o *Outbox) Cancel(ctx context.Context, db bun.IDB, ids ...uuid.UUID) error {
	if o.reg.err != nil {
		return o.reg.err
	}
	if len(ids) == 0 {
		return nil
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	var unknown []uuid.UUID
	if err := db.NewRaw(o.reg.tables.SQL(cancelSQL), pgdialect.Array(s), cancelNeverPublished).Scan(ctx, &unknown); err != nil {
		return fmt.Errorf("bunx: cancel: %w", err)
	}
	if len(unknown) > 0 {
		return unknownEventError(unknown)
	}
	return nil
}
