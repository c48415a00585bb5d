package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/model"
)

// claimSQL locks the next batch of due rows. It walks the partial index outbox_events_pending_idx in id
// order (so the cost does not grow with the published history) and skips rows other relays hold.
const claimSQL = `SELECT id, event_id, event_name, queue, payload, metadata, created_at, attempts
FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// due reports whether a row may be waiting to be claimed; an error says yes, so that the round that
// follows meets it and backs off.
func (r *Relay) due(ctx context.Context) bool {
	var due bool
	err := r.db.NewRaw(`SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL AND (next_attempt_at IS NULL OR next_attempt_at <= now()))`).Scan(ctx, &due)
	return err != nil || due
}

// errMalformedRow marks a claimed row that cannot become a task; the round marks it dead at once.
var errMalformedRow = errors.New("bunbox: malformed outbox row")

// claim locks and reads the next batch. A row whose metadata is not a JSON object of strings comes back
// in bad (index into events → error), to be marked dead rather than block the rows behind it. The scan
// is by hand rather than through bun's model scan: it is the relay's hottest read.
func claim(ctx context.Context, tx bun.Tx, n int) (events []model.Event, bad map[int]error, err error) {
	rows, err := tx.QueryContext(ctx, claimSQL, n)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	events = make([]model.Event, 0, n)
	var metadata sql.RawBytes // valid until the next row: decoded at once
	for rows.Next() {
		var ev model.Event
		payload := (*[]byte)(&ev.Payload) // database/sql copies into it
		if err := rows.Scan(&ev.ID, &ev.EventID, &ev.Name, &ev.Queue, payload, &metadata, &ev.CreatedAt, &ev.Attempts); err != nil {
			return nil, nil, err
		}
		if len(metadata) > 2 { // "{}" is the column's default: no map to make
			if err := json.Unmarshal(metadata, &ev.Metadata); err != nil {
				if bad == nil {
					bad = map[int]error{}
				}
				bad[len(events)] = fmt.Errorf("%w: column metadata must be a JSON object of strings: %v", errMalformedRow, err)
			}
		}
		events = append(events, ev)
	}
	return events, bad, rows.Err()
}

// markChunk is how many delivered rows markStream marks per statement.
const markChunk = 100

// markStream marks the rows whose ids arrive on ids as published, a chunk at a time while the rest of the
// batch is still being enqueued, so that the marks overlap the enqueues; it marks the last chunk when ids
// is closed, and returns how many rows it marked. After an error it drains ids and marks nothing more:
// the round rolls back.
func markStream(ctx context.Context, tx bun.Tx, ids <-chan int64) (int, error) {
	var n int
	var err error
	chunk := make([]int64, 0, markChunk)
	flush := func() {
		if err == nil && len(chunk) > 0 {
			err = markPublished(ctx, tx, chunk)
			n += len(chunk)
		}
		chunk = chunk[:0]
	}
	for id := range ids {
		if chunk = append(chunk, id); len(chunk) == markChunk {
			flush()
		}
	}
	flush()
	return n, err
}

func markPublished(ctx context.Context, tx bun.Tx, ids []int64) error {
	_, err := tx.NewRaw(`UPDATE outbox_events SET published_at = now(), next_attempt_at = NULL
WHERE id = ANY(?)`, pgdialect.Array(ids)).Exec(ctx)
	return err
}

// failure is one row whose enqueue failed.
type failure struct {
	id       int64
	attempts int // including this one
	delay    time.Duration
	dead     bool
	err      string
}

func markFailed(ctx context.Context, tx bun.Tx, fs []failure) error {
	if len(fs) == 0 {
		return nil
	}
	ids := make([]int64, len(fs))
	attempts := make([]int64, len(fs))
	delays := make([]int64, len(fs))
	dead := make([]bool, len(fs))
	errs := make([]string, len(fs))
	for i, f := range fs {
		ids[i], attempts[i], delays[i], dead[i], errs[i] = f.id, int64(f.attempts), f.delay.Microseconds(), f.dead, f.err
	}
	_, err := tx.NewRaw(`UPDATE outbox_events AS o SET
  attempts = f.attempts,
  last_error = f.err,
  next_attempt_at = CASE WHEN f.dead THEN NULL ELSE now() + f.delay * interval '1 microsecond' END,
  dead_at = CASE WHEN f.dead THEN now() END
FROM unnest(?::bigint[], ?::int[], ?::bigint[], ?::boolean[], ?::text[]) AS f(id, attempts, delay, dead, err)
WHERE o.id = f.id`,
		pgdialect.Array(ids), pgdialect.Array(attempts), pgdialect.Array(delays), pgdialect.Array(dead),
		pgdialect.Array(errs)).Exec(ctx)
	return err
}
