package relay

import (
	"context"
	"database/sql"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// keyedHeadsSQL is the common part of the keyed claim and of dueKeyed: the head of every key, the head
// being the key's first row not yet completed. It walks outbox_events_keyed_open_idx one index descent
// per key (a skip scan): the cost follows the number of keys with unfinished rows (pending, in asynq or
// dead), not the number of rows queued behind them. The row-wise ORDER BY (ordering_key, id) with a range
// on ordering_key is what only that index can serve, so the planner cannot walk the primary key instead.
const keyedHeadsSQL = `WITH RECURSIVE heads AS (
  (SELECT ordering_key, id FROM outbox_events
   WHERE ordering_key IS NOT NULL AND completed_at IS NULL
   ORDER BY ordering_key, id LIMIT 1)
  UNION ALL
  SELECT n.ordering_key, n.id FROM heads, LATERAL (
    SELECT e.ordering_key, e.id FROM outbox_events e
    WHERE e.ordering_key > heads.ordering_key AND e.completed_at IS NULL
    ORDER BY e.ordering_key, e.id LIMIT 1) n
)
`

// keyedClaimSQL locks the heads that are pending and due, oldest first. A head another relay holds is
// skipped, and the rows behind it are not heads: two relays never hold two rows of one key. A head that
// is published, dead or not yet due holds its key. A cancelled head is never claimed, and holds its key
// only until it is completed: at once by the cancel when it was never published, or by the relay's
// cancel pass once its task is out of asynq (see cancel.go).
//
// The heads are found without locks, and the rows are then locked: a head that another relay published
// in between fails the re-check of published_at that PostgreSQL makes on the locked row. A row stops
// being its key's head only by being completed, which needs it published first.
const keyedClaimSQL = keyedHeadsSQL + `SELECT ` + claimColumns + keyedClaimFrom

// keyedClaimFrom is keyedClaimSQL after its columns.
const keyedClaimFrom = `
FROM outbox_events
WHERE id IN (SELECT id FROM heads)
  AND published_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// claimRound locks the batch of a round, at most n rows within Config.BatchBytes: the keyed heads first,
// at most half the rows so that unkeyed rows always have room, then unkeyed rows to fill it with what is
// left of the rows and the bytes (by queue with Config.Queues, see claimUnkeyed). Without an inspector
// (see Config.Inspector) keyed rows are left alone.
func (r *Relay) claimRound(ctx context.Context, tx bun.Tx, n int) ([]model.Event, map[int]error, error) {
	budget := r.cfg.BatchBytes
	windowed := r.sizer.windowed(n, budget)
	if r.keys == nil {
		return r.claimUnkeyed(ctx, tx, make([]model.Event, 0, n), nil, n, budget, windowed)
	}
	var events []model.Event
	var bad map[int]error
	var err error
	if windowed {
		events, bad, err = claimBy(ctx, tx, make([]model.Event, 0, n), nil, keyedClaimBudgetSQL, true, budget, max(1, n/2))
	} else {
		var rows *sql.Rows
		if rows, err = r.queryKeyedClaim(ctx, tx, max(1, n/2)); err == nil {
			events, bad, err = scanClaim(rows, make([]model.Event, 0, n), nil, budget)
		}
	}
	if err != nil || len(events) == n {
		return events, bad, err
	}
	left := budget - claimedBytes(events)
	if len(events) > 0 && left <= 0 {
		return events, bad, nil
	}
	return r.claimUnkeyed(ctx, tx, events, bad, n-len(events), max(left, 1), windowed)
}

// dueKeyed reports whether a keyed row may be waiting to be claimed; an error says yes.
func (r *Relay) dueKeyed(ctx context.Context) bool {
	if r.keys == nil {
		return false
	}
	var due bool
	err := r.db.NewRaw(keyedHeadsSQL+`SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE id IN (SELECT id FROM heads) AND published_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now()))`).Scan(ctx, &due)
	return err != nil || due
}
