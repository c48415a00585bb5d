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

// The key tracker's statements: a keyed row in flight completes, goes back in line, or dies.

// KeyedRow is the part of a keyed row in flight that the key tracker needs.
type KeyedRow struct {
	ID      int64
	EventID uuid.UUID
	Name    string
	Queue   string
	Key     string
}

// LockKeyedInFlight locks (SKIP LOCKED) up to limit keyed rows in flight after id after, in id order:
// published, not completed, not dead. A keyed row of the stream has no task (the stream hands it over).
func LockKeyedInFlight(ctx context.Context, tx bun.Tx, names tables.Names, after int64, limit int) ([]KeyedRow, error) {
	rows, err := tx.QueryContext(ctx, names.SQL(`SELECT id, event_id, event_name, queue, ordering_key FROM outbox_events
WHERE ordering_key IS NOT NULL AND completed_at IS NULL AND published_at IS NOT NULL AND dead_at IS NULL AND id > ?
  AND published_at <> 'infinity' -- a keyed row of the stream has no task: the stream hands it over (stream_round.go)
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`), after, limit)
	if err != nil {
		return nil, fmt.Errorf("read keyed rows in flight: %w", err)
	}
	defer rows.Close()
	var page []KeyedRow
	for rows.Next() {
		var row KeyedRow
		if err := rows.Scan(&row.ID, &row.EventID, &row.Name, &row.Queue, &row.Key); err != nil {
			return nil, err
		}
		page = append(page, row)
	}
	return page, rows.Err()
}

// CompleteKeyed marks the keyed rows ids completed: the next row of each key becomes its head.
func CompleteKeyed(ctx context.Context, db bun.IDB, names tables.Names, ids []int64) error {
	_, err := db.NewRaw(names.SQL(`UPDATE outbox_events SET completed_at = clock_timestamp() WHERE id = ANY(?)`),
		pgdialect.Array(ids)).Exec(ctx)
	return err
}

// RequeueKeyed puts the keyed rows ids back in line, their last_error lastError; their keys stay held.
func RequeueKeyed(ctx context.Context, db bun.IDB, names tables.Names, ids []int64, lastError string) error {
	_, err := db.NewRaw(names.SQL(`UPDATE outbox_events SET published_at = NULL, next_attempt_at = NULL, last_error = ?
WHERE id = ANY(?)`), lastError, pgdialect.Array(ids)).Exec(ctx)
	return err
}

// KillKeyed marks the keyed rows ids dead, each with its error of errs.
func KillKeyed(ctx context.Context, db bun.IDB, names tables.Names, ids []int64, errs []string) error {
	_, err := db.NewRaw(names.SQL(`UPDATE outbox_events AS o SET dead_at = now(), last_error = d.err
FROM unnest(?::bigint[], ?::text[]) AS d(id, err) WHERE o.id = d.id`),
		pgdialect.Array(ids), pgdialect.Array(errs)).Exec(ctx)
	return err
}

// KeyedWaiting reports whether keyed rows wait for a relay that can track them: pending ones, and those
// waiting in the stream, which hands every keyed row to the per-row path.
func KeyedWaiting(ctx context.Context, db bun.IDB, names tables.Names) (bool, error) {
	var keyed bool
	err := db.NewRaw(names.SQL(`SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE ordering_key IS NOT NULL AND completed_at IS NULL AND dead_at IS NULL
  AND (published_at IS NULL OR published_at = `+streamsql.Sentinel+`))`)).Scan(ctx, &keyed)
	return keyed, err
}
