package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/badrow"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// listDeadLimitDefault is how many dead events ListDead lists when limit is not positive.
const listDeadLimitDefault = 100

// ListDead lists up to limit events the relay gave up on, oldest first, with their attempts and last
// error. A limit <= 0 means 100.
//
// A row that raw SQL wrote around bunx (metadata that is not a JSON object of strings, a time that is
// not finite) does not fail the list: it is listed with the others, its Metadata holding only the key
// "bunbox-bad-row", whose value says what is wrong and quotes the column (a bad time is set to zero and
// named under that key too). A published_at of the stream ('infinity') reads as nil.
func (o *Outbox) ListDead(ctx context.Context, limit int) ([]model.Event, error) {
	if limit <= 0 {
		limit = listDeadLimitDefault
	}
	db, names := o.db, o.names
	var events []model.Event
	q := db.NewSelect().Model(&events)
	if !names.IsDefault() {
		q = q.ModelTableExpr(names.Outbox() + " AS oe")
	}
	q = badrow.Select(q, "oe", "oe.published_at")
	err := q.Where("dead_at IS NOT NULL").OrderExpr("id").Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: list dead events: %w", err)
	}
	return events, nil
}

// RetryDead puts the dead events with the given event ids back in line: their attempts are reset and the
// relay picks them up on its next round (the last error is kept for reference). It returns how many rows
// it revived; ids that are unknown, not dead or cancelled (bunx.Outbox.Cancel) are ignored. A keyed event whose task asynq archived is
// enqueued again: the relay deletes the archived task and enqueues a fresh one, and its key is unblocked
// once that task completes.
func (o *Outbox) RetryDead(ctx context.Context, eventIDs ...uuid.UUID) (int64, error) {
	if len(eventIDs) == 0 {
		return 0, nil
	}
	db, names := o.db, o.names
	res, err := db.NewRaw(names.SQL(`UPDATE outbox_events SET dead_at = NULL, attempts = 0, next_attempt_at = NULL, published_at = NULL
WHERE event_id = ANY(?::uuid[]) AND dead_at IS NOT NULL AND cancelled_at IS NULL`), pgdialect.Array(uuidStrings(eventIDs))).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("admin: retry dead events: %w", err)
	}
	return res.RowsAffected()
}

func uuidStrings(ids []uuid.UUID) []string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return s
}

// Backlog is the state of the outbox table.
type Backlog struct {
	// Pending counts the rows not yet published, not dead and not cancelled: with the snapshot cursor
	// (relay.EnableStream), the streamed rows it has not delivered yet too.
	Pending int64
	// Dead counts the rows the relay gave up on (cancelled ones included).
	Dead int64
	// Lag is the age of the oldest pending row (streamed ones included); 0 when none is pending.
	Lag time.Duration
	// Scheduled counts the published rows whose ProcessAt (model.WithProcessAt/WithProcessIn) is still
	// ahead on the database's clock: their tasks wait in asynq's scheduled set. It is read from
	// PostgreSQL, not from Redis: a task Redis lost still counts until the reconciler requeues it.
	// Streamed rows count once the cursor has delivered them.
	Scheduled int64
	// BlockedKeys counts the ordering keys held by a dead event (see BlockedKeys).
	BlockedKeys int64
}

// ReadBacklog reads the number of pending, dead and scheduled rows and the age of the oldest pending row,
// using the partial indexes. Counting is proportional to the backlog and the rows with a ProcessAt, not to
// the table. Streamed rows (relay.EnableStream) count as pending while the cursor has not passed them
// (read through the stream's index, from the oldest transaction the cursor waits for).
func (o *Outbox) ReadBacklog(ctx context.Context) (Backlog, error) {
	var b Backlog
	var lagSeconds float64
	names := o.names
	err := store.ReadWithoutJIT(ctx, o.db, func(ctx context.Context, db bun.IDB) error {
		return db.NewRaw(names.SQL(`WITH p AS MATERIALIZED (SELECT e.created_at FROM `+streamsql.PendingRows+` e)
SELECT
  (SELECT count(*) FROM outbox_events WHERE published_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL)
    + (SELECT count(*) FROM p),
  (SELECT count(*) FROM outbox_events WHERE dead_at IS NOT NULL),
  greatest(coalesce((SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 FROM outbox_events
    WHERE published_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL ORDER BY id LIMIT 1), 0),
    coalesce((SELECT extract(epoch FROM clock_timestamp() - min(p.created_at))::float8 FROM p), 0)),
  (SELECT count(*) FROM outbox_events e `+streamsql.Cursor+` WHERE e.process_at > now() AND e.cancelled_at IS NULL
    AND e.published_at IS NOT NULL AND (e.published_at <> 'infinity' OR `+streamsql.Delivered+`)),
  (SELECT count(DISTINCT ordering_key) FROM outbox_events
    WHERE dead_at IS NOT NULL AND ordering_key IS NOT NULL AND completed_at IS NULL)`)).
			Scan(ctx, &b.Pending, &b.Dead, &lagSeconds, &b.Scheduled, &b.BlockedKeys)
	})
	if err != nil {
		return Backlog{}, fmt.Errorf("admin: read outbox backlog: %w", err)
	}
	b.Lag = time.Duration(max(lagSeconds, 0) * float64(time.Second))
	return b, nil
}
