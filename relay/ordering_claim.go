package relay

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
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
//
// A row can become its key's head late: its transaction took its id before another transaction took a
// higher one of the same key, and committed after that row was relayed. Such a head is not claimed while
// a row of its key is in flight (keyInFlightSQL): the two would run at once. What this statement cannot
// see, a round that holds the other row and has not committed yet, holdKeys sees.
const keyedClaimSQL = keyedHeadsSQL + `SELECT ` + claimColumns + keyedClaimFrom

// keyedClaimFrom is keyedClaimSQL after its columns.
const keyedClaimFrom = `
FROM outbox_events
WHERE id IN (SELECT id FROM heads WHERE heads.ordering_key NOT IN (` + keyInFlightSQL + `))
  AND published_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// keyInFlightSQL selects the keys of the keyed rows in flight: published, their task not yet seen
// completed, not dead. A keyed row waiting in the stream (published_at 'infinity') has no task: the stream
// hands it over unsent, so it does not hold its key. (Counted, it kept a handed-over head waiting until the
// stream had passed every later row of its key; the tracker's page, trackPage, already left it out.)
//
// It reads the partial index outbox_events_keyed_inflight_idx, whose rows are about one per key that has
// a task in asynq, and the planner hashes them once per claim, to drop the heads of those keys before it
// looks the heads up. EXPLAIN ANALYZE of the claim of 250 heads over 2,000 keys and 200,000 rows, on the
// loaded dev machine: 0.31 to 0.55 s with the filter, 0.34 to 0.54 s without.
const keyInFlightSQL = `SELECT ordering_key FROM outbox_events
    WHERE ordering_key IS NOT NULL AND completed_at IS NULL AND published_at IS NOT NULL AND dead_at IS NULL
      AND published_at <> ` + streamsql.Sentinel

// keyLockClass is the first half of the transaction-level advisory locks that holdKeys takes on ordering
// keys (the second is the key's hashtext): "bbx1".
const keyLockClass = 0x62627831

// holdKeys makes the keyed rows of a claim (events, bad: see claimBy) safe to enqueue, and gives back
// those that are. For each of their keys it takes a transaction-level advisory lock, which the round
// holds until it commits, and so until the key's row it relays is marked published for all to see. A key
// whose lock another round holds, or that has a row in flight once the locks are held (in a statement
// that starts after they were taken, so READ COMMITTED shows every round that held them before), has
// another row in hand: its claimed row is left out, not tried and not charged, and stays locked until the
// round ends. Two keys with one hash only wait for each other.
func holdKeys(ctx context.Context, tx bun.Tx, names tables.Names, events []model.Event, bad map[int]error) ([]model.Event, map[int]error, error) {
	var keys []string
	for i := range events {
		if events[i].OrderingKey != "" {
			keys = append(keys, events[i].OrderingKey)
		}
	}
	if len(keys) == 0 {
		return events, bad, nil
	}
	busy := map[string]bool{}
	scan := func(query string, args ...any) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			busy[k] = true
		}
		return rows.Err()
	}
	if err := scan(`SELECT k FROM unnest(?::text[]) AS k WHERE NOT pg_try_advisory_xact_lock(?, hashtext(k))`,
		pgdialect.Array(keys), names.LockClass(keyLockClass)); err != nil {
		return nil, nil, fmt.Errorf("lock ordering keys: %w", err)
	}
	if err := scan(names.SQL(`SELECT DISTINCT ordering_key FROM (`+keyInFlightSQL+`) AS f WHERE ordering_key = ANY(?)`),
		pgdialect.Array(keys)); err != nil {
		return nil, nil, fmt.Errorf("check ordering keys: %w", err)
	}
	if len(busy) == 0 {
		return events, bad, nil
	}
	kept := events[:0]
	var keptBad map[int]error
	for i := range events {
		if busy[events[i].OrderingKey] {
			continue
		}
		if err := bad[i]; err != nil {
			if keptBad == nil {
				keptBad = map[int]error{}
			}
			keptBad[len(kept)] = err
		}
		kept = append(kept, events[i])
	}
	return kept, keptBad, nil
}

// claimRound locks the batch of a round, at most n rows within Config.BatchBytes (fewer on the first claim
// of a relay when its rows are large, see claimSizer.sample): the keyed heads first,
// at most half the rows so that unkeyed rows always have room, then unkeyed rows to fill it with what is
// left of the rows and the bytes (by queue with Config.Queues, see claimUnkeyed). Without an inspector
// (see Config.Inspector) keyed rows are left alone.
func (r *Relay) claimRound(ctx context.Context, tx bun.Tx, n int) ([]model.Event, map[int]error, error) {
	budget := r.cfg.BatchBytes
	first := r.sizer.meanRow.Load() <= 0
	if first {
		// The first claim: sized from the rows at the head of the line, not BatchSize of them, and cut
		// at the budget in PostgreSQL, as before the sample.
		if err := r.sizer.sample(ctx, tx, r.names); err != nil {
			return nil, nil, err
		}
		n = r.sizer.limit(n, budget)
	}
	windowed := first || r.sizer.windowed(n, budget)
	if r.keys == nil {
		return r.claimUnkeyed(ctx, tx, make([]model.Event, 0, n), nil, n, budget, windowed)
	}
	var events []model.Event
	var bad map[int]error
	var err error
	if windowed {
		events, bad, err = claimBy(ctx, tx, make([]model.Event, 0, n), nil, r.names.SQL(keyedClaimBudgetSQL), true, budget, max(1, n/2))
	} else {
		var rows *sql.Rows
		if rows, err = r.queryKeyedClaim(ctx, tx, max(1, n/2)); err == nil {
			events, bad, err = scanClaim(rows, make([]model.Event, 0, n), nil, budget)
		}
	}
	if err == nil {
		events, bad, err = holdKeys(ctx, tx, r.names, events, bad)
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
	err := r.db.NewRaw(r.names.SQL(keyedHeadsSQL+`SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE id IN (SELECT id FROM heads WHERE heads.ordering_key NOT IN (`+keyInFlightSQL+`))
  AND published_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now()))`)).Scan(ctx, &due)
	return err != nil || due
}
