package relay

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// claimColumns are the columns every claim reads, in the order claimBy scans them.
const claimColumns = `id, event_id, event_name, queue, payload, metadata, created_at, attempts,
  process_at, max_retry, coalesce(timeout_ns, 0), deadline, coalesce(task_group, ''), coalesce(retention_ns, 0),
  coalesce(ordering_key, ''), payload_encoded`

// claimSQL locks the next batch of due unkeyed rows (keyed ones are claimed by keyedClaimSQL). It walks
// the partial index outbox_events_unkeyed_pending_idx in id order (so the cost does not grow with the
// published history, nor with keyed rows held back behind their key, nor with cancelled rows) and skips
// rows other relays hold. A cancelled row (bunx.Outbox.Cancel) is never claimed: a cancel that commits
// while a round holds the row waits for the round, and then finds the row published.
const claimSQL = `SELECT ` + claimColumns + claimFrom

// claimFrom is claimSQL after its columns.
const claimFrom = `
FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// due reports whether a row may be waiting to be claimed; an error says yes, so that the round that
// follows meets it and backs off.
func (r *Relay) due(ctx context.Context) bool {
	var due bool
	err := r.db.NewRaw(r.names.SQL(`SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now()))`)).Scan(ctx, &due)
	return err != nil || due || r.dueKeyed(ctx)
}

// errMalformedRow marks a claimed row that cannot become a task; the round marks it dead at once.
var errMalformedRow = errors.New("relay: malformed outbox row")

// claim locks and reads the next batch of unkeyed rows: up to n rows, and no more than budget bytes of
// payload and metadata unless the first row alone is larger (see budgeted). A row that cannot become a
// task (see readRow) comes back in bad (index into events → error), to be marked dead rather than block
// the rows behind it. windowed picks the claim that cuts at the budget in PostgreSQL (see claimQuery).
func claim(ctx context.Context, tx bun.Tx, n int, budget int64, windowed bool) (events []model.Event, bad map[int]error, err error) {
	return claimBy(ctx, tx, make([]model.Event, 0, n), nil, claimQuery(false, windowed), windowed, budget, n)
}

// claimBy runs query (one of claimQuery's or queueClaimQuery's), which selects claimColumns and row_size
// and locks rows, with the query's own args (the last being how many rows), followed by budget when the
// query is windowed (budgeted). It appends the rows it locked to events (and the errors of the rows that
// cannot become tasks to bad, by index into events), stopping before the first row that would take the
// rows it appended over budget bytes, unless it is the first (see budgeted). The scan is by hand rather
// than through bun's model scan: it is the relay's hottest read.
func claimBy(ctx context.Context, tx bun.Tx, events []model.Event, bad map[int]error, query string, windowed bool,
	budget int64, args ...any,
) (_ []model.Event, _ map[int]error, err error) {
	if windowed {
		args = append(args, budget)
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	return scanClaim(rows, events, bad, budget)
}

// scanClaim reads the rows of a claim for claimBy, and closes them.
func scanClaim(rows *sql.Rows, events []model.Event, bad map[int]error, budget int64) (
	_ []model.Event, _ map[int]error, err error,
) {
	defer rows.Close()        // reads and drops the rows past the budget: they stay locked until the round ends
	var metadata sql.RawBytes // valid until the next row: decoded at once
	var timeoutNs, retentionNs, size, taken int64
	first := len(events)
	for rows.Next() {
		i := len(events)
		events = append(events, model.Event{}) // scanned in place: a row's own variable would escape to the heap
		ev := &events[i]
		payload := (*[]byte)(&ev.Payload) // database/sql copies into it
		err := rows.Scan(&ev.ID, &ev.EventID, &ev.Name, &ev.Queue, payload, &metadata, &ev.CreatedAt, &ev.Attempts,
			&ev.ProcessAt, &ev.MaxRetry, &timeoutNs, &ev.Deadline, &ev.Group, &retentionNs, // delivery options
			&ev.OrderingKey, &ev.PayloadEncoded, &size)
		if err != nil {
			return nil, nil, err
		}
		if i > first && taken+size > budget {
			events[i] = model.Event{} // not kept: let its payload go
			events = events[:i]
			break
		}
		taken += size
		ev.Timeout, ev.TaskRetention = time.Duration(timeoutNs), time.Duration(retentionNs)
		if err := readRow(ev, metadata); err != nil {
			if bad == nil {
				bad = map[int]error{}
			}
			bad[i] = err
		}
	}
	return events, bad, rows.Err()
}
