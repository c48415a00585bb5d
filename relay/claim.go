package relay

import (
	"context"
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

func claim(ctx context.Context, tx bun.Tx, n int) ([]model.Event, error) {
	events := make([]model.Event, 0, n)
	if err := tx.NewRaw(claimSQL, n).Scan(ctx, &events); err != nil {
		return nil, err
	}
	return events, nil
}

func markPublished(ctx context.Context, tx bun.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
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
