package store

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

// ClaimSQL locks the next batch of due unkeyed rows (keyed ones are claimed by KeyedClaimSQL). It walks
// the partial index outbox_events_unkeyed_pending_idx in id order (so the cost does not grow with the
// published history, nor with keyed rows held back behind their key, nor with cancelled rows) and skips
// rows other relays hold. A cancelled row (bunx.Outbox.Cancel) is never claimed: a cancel that commits
// while a round holds the row waits for the round, and then finds the row published. Argument: how many
// rows.
const ClaimSQL = `SELECT ` + Columns + claimFrom

// pendingUnkeyed is the condition of an unkeyed row the per-row path claims when it is due.
const pendingUnkeyed = `published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL`

// due is the condition of a row whose next attempt, if any, is due.
const due = `(next_attempt_at IS NULL OR next_attempt_at <= now())`

// claimFrom is ClaimSQL after its columns.
const claimFrom = `
FROM outbox_events
WHERE ` + pendingUnkeyed + `
  AND ` + due + `
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// keyedHeadsSQL is the common part of the keyed claim and of the keyed due check: the head of every key,
// the head being the key's first row not yet completed. It walks outbox_events_keyed_open_idx one index
// descent per key (a skip scan): the cost follows the number of keys with unfinished rows (pending, in
// asynq or dead), not the number of rows queued behind them. The row-wise ORDER BY (ordering_key, id) with
// a range on ordering_key is what only that index can serve, so the planner cannot walk the primary key
// instead.
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

// KeyedClaimSQL locks the heads that are pending and due, oldest first. A head another relay holds is
// skipped, and the rows behind it are not heads: two relays never hold two rows of one key. A head that
// is published, dead or not yet due holds its key. A cancelled head is never claimed, and holds its key
// only until it is completed: at once by the cancel when it was never published, or by the relay's
// cancel pass once its task is out of asynq.
//
// The heads are found without locks, and the rows are then locked: a head that another relay published
// in between fails the re-check of published_at that PostgreSQL makes on the locked row. A row stops
// being its key's head only by being completed, which needs it published first.
//
// A row can become its key's head late: its transaction took its id before another transaction took a
// higher one of the same key, and committed after that row was relayed. Such a head is not claimed while
// a row of its key is in flight (keyInFlightSQL): the two would run at once. What this statement cannot
// see, a round that holds the other row and has not committed yet, Claims.HoldKeys sees.
const KeyedClaimSQL = keyedHeadsSQL + `SELECT ` + Columns + keyedClaimFrom

// keyedHeadsDue is the condition of a keyed head the claim takes.
const keyedHeadsDue = `id IN (SELECT id FROM heads WHERE heads.ordering_key NOT IN (` + keyInFlightSQL + `))
  AND published_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL
  AND ` + due

// keyedClaimFrom is KeyedClaimSQL after its columns.
const keyedClaimFrom = `
FROM outbox_events
WHERE ` + keyedHeadsDue + `
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// keyInFlightSQL selects the keys of the keyed rows in flight: published, their task not yet seen
// completed, not dead. A keyed row waiting in the stream (published_at 'infinity') has no task: the stream
// hands it over unsent, so it does not hold its key. (Counted, it kept a handed-over head waiting until the
// stream had passed every later row of its key; the tracker's page already left it out.)
//
// It reads the partial index outbox_events_keyed_inflight_idx, whose rows are about one per key that has
// a task in asynq, and the planner hashes them once per claim, to drop the heads of those keys before it
// looks the heads up. EXPLAIN ANALYZE of the claim of 250 heads over 2,000 keys and 200,000 rows, on the
// loaded dev machine: 0.31 to 0.55 s with the filter, 0.34 to 0.54 s without.
const keyInFlightSQL = `SELECT ordering_key FROM outbox_events
    WHERE ordering_key IS NOT NULL AND completed_at IS NULL AND published_at IS NOT NULL AND dead_at IS NULL
      AND published_at <> ` + streamsql.Sentinel

// Budgeted wraps a sized claim query (ClaimSizedSQL or the keyed one) so that PostgreSQL stops it at a
// byte budget: of the rows the query locks, in id order, it returns the longest run whose payload and
// metadata fit in the budget, and always the first row, however large. Since the run is a prefix in id
// order, it is the rows up to a cutoff id, so the result has the query's own columns, whatever they are.
// The rows locked beyond the budget are released when the round's transaction ends. Arguments: the
// query's own (the batch size), then the budget in bytes.
//
// The window over the locked rows costs PostgreSQL about as much again as the claim of small rows itself
// (BenchmarkClaim), so the relay runs it only when the rows may be large; the sized claim's rows are then
// cut at the same place by Scan as it reads them.
func Budgeted(query string) string {
	return `WITH claimed AS MATERIALIZED (
` + query + `
)
SELECT * FROM claimed WHERE id <= (
  SELECT max(id) FROM (
    SELECT id, row_number() OVER w AS n, sum(row_size) OVER w AS running
    FROM claimed WINDOW w AS (ORDER BY id)
  ) sized
  WHERE n = 1 OR running <= ?
)
ORDER BY id`
}

// The relay's claims: ClaimSQL and KeyedClaimSQL with one more column, row_size (RowSize), and the same
// two under the byte budget's window.
var (
	ClaimSizedSQL       = `SELECT ` + Columns + `, ` + RowSize + ` AS row_size` + claimFrom
	keyedClaimSizedSQL  = keyedHeadsSQL + `SELECT ` + Columns + `, ` + RowSize + ` AS row_size` + keyedClaimFrom
	ClaimBudgetSQL      = Budgeted(ClaimSizedSQL)
	keyedClaimBudgetSQL = Budgeted(keyedClaimSizedSQL)
)

// queueClaimFrom is the claim of a share of the relay's Config.Queues after its columns: the pending rows
// of the share's queues (one named queue, or the rest) after a cursor id, in id order. Each queue is read
// on outbox_events_queue_claim_idx (queue, id) on its own, so a backlog in one queue costs nothing to the
// claim of another, and the rest's queues are merged in id order (first come, first served, as without
// Queues). Of the rows each queue locks, those past the LIMIT are released when the round ends.
// Arguments: the queues (a text array), the cursor, the limit twice.
//
// `(queue, id) > (q.name, cursor) AND queue <= q.name` is `queue = q.name AND id > cursor` written so
// that only the (queue, id) index can serve it in (queue, id) order: with the equality, PostgreSQL
// estimated each queue of the lateral claim at the rows of the queue its statistics knew (the backlog),
// read outbox_events_unkeyed_pending_idx instead and filtered the whole backlog to find the one row of a
// quiet queue, 50–130 ms of every round behind 100,000 bulk rows (TestQueuesClaimReadsTheQueueIndex).
const queueClaimFrom = `
FROM unnest(?::text[]) AS q(name) CROSS JOIN LATERAL (
  SELECT ` + Columns + `, ` + RowSize + ` AS row_size
  FROM outbox_events
  WHERE (queue, id) > (q.name, ?) AND queue <= q.name
    AND ` + pendingUnkeyed + `
    AND ` + due + `
  ORDER BY queue, id
  LIMIT ?
  FOR UPDATE SKIP LOCKED) c
ORDER BY id
LIMIT ?`

// The claim of a share, with the row sizes and under the byte budget's window (see Budgeted).
var (
	QueueClaimSizedSQL  = `SELECT c.*` + queueClaimFrom
	queueClaimBudgetSQL = Budgeted(QueueClaimSizedSQL)
)

// restQueuesSQL lists the queues with pending unkeyed rows that Config.Queues does not name (its one
// argument, a text array): a skip scan of outbox_events_queue_claim_idx, one index descent per queue
// with pending rows, however many rows they hold.
const restQueuesSQL = `WITH RECURSIVE qs AS (
  (SELECT queue FROM outbox_events
   WHERE ` + pendingUnkeyed + `
   ORDER BY queue LIMIT 1)
  UNION ALL
  SELECT n.queue FROM qs, LATERAL (
    SELECT e.queue FROM outbox_events e
    WHERE e.queue > qs.queue
      AND e.published_at IS NULL AND e.dead_at IS NULL AND e.ordering_key IS NULL AND e.cancelled_at IS NULL
    ORDER BY e.queue LIMIT 1) n
)
SELECT queue FROM qs WHERE NOT (queue = ANY(?::text[]))`

// laneTopSQL is the highest id of a pending unkeyed row in the queues of its one argument (a text array),
// 0 when there is none: one backward descent of outbox_events_queue_claim_idx per queue. Rows waiting for
// a retry count too, so that the look costs the same however many of them a queue holds; a new row has a
// higher id than they.
const laneTopSQL = `SELECT coalesce(max(m.id), 0) FROM unnest(?::text[]) AS q(name) CROSS JOIN LATERAL (
  SELECT id FROM outbox_events
  WHERE (queue, id) > (q.name, 0) AND queue <= q.name
    AND ` + pendingUnkeyed + `
  ORDER BY queue DESC, id DESC
  LIMIT 1) m`

// keyLockClass is the first half of the transaction-level advisory locks that HoldKeys takes on ordering
// keys (the second is the key's hashtext): "bbx1".
const keyLockClass = 0x62627831

// Claims runs the per-row path's reads on one outbox's tables: the claims that lock the rows a round
// delivers (unkeyed, keyed heads, by queue), and the cheap checks for rows due.
type Claims struct {
	names    tables.Names
	prepared *Prepared

	unkeyed, unkeyedBudget, keyedBudget, queue, queueBudget string // the claims, qualified
	rest, laneTop, due, dueKeyed, sample, inFlight          string
}

// NewClaims returns the claims of names's outbox; the keyed claim runs prepared through p where it can.
func NewClaims(names tables.Names, p *Prepared) *Claims {
	return &Claims{names: names, prepared: p,
		unkeyed: names.SQL(ClaimSizedSQL), unkeyedBudget: names.SQL(ClaimBudgetSQL),
		keyedBudget: names.SQL(keyedClaimBudgetSQL),
		queue:       names.SQL(QueueClaimSizedSQL), queueBudget: names.SQL(queueClaimBudgetSQL),
		rest: names.SQL(restQueuesSQL), laneTop: names.SQL(laneTopSQL),
		due: names.SQL(`SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE ` + pendingUnkeyed + `
  AND ` + due + `)`),
		dueKeyed: names.SQL(keyedHeadsSQL + `SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE ` + keyedHeadsDue + `)`),
		sample: names.SQL(`SELECT max(` + RowSize + `) FROM (SELECT payload, metadata, payload_encoded FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL ORDER BY id LIMIT ?) AS head`),
		inFlight: names.SQL(`SELECT DISTINCT ordering_key FROM (` + keyInFlightSQL + `) AS f WHERE ordering_key = ANY(?)`),
	}
}

// Read is how a claim hands its rows to Scan: the rows appended to, the byte budget, and the callback of
// each row kept.
type Read struct {
	Events []model.Event
	Budget int64
	Kept   func(i int, ev *model.Event, metadata []byte)
}

func (r Read) scan(rows *sql.Rows, err error) ([]model.Event, error) {
	if err != nil {
		return nil, err
	}
	events, _, err := Scan(rows, r.Events, r.Budget, nil, r.Kept)
	return events, err
}

// Unkeyed locks up to n due unkeyed rows in id order (ClaimSQL) and reads them into rd, cut at its budget
// by PostgreSQL when windowed (Budgeted), else as they are read.
func (c *Claims) Unkeyed(ctx context.Context, tx bun.Tx, rd Read, windowed bool, n int) ([]model.Event, error) {
	if windowed {
		return rd.scan(tx.QueryContext(ctx, c.unkeyedBudget, n, rd.Budget))
	}
	return rd.scan(tx.QueryContext(ctx, c.unkeyed, n))
}

// Keyed locks up to n due heads of their keys (KeyedClaimSQL) and reads them into rd, as Unkeyed; the
// claim without the window runs prepared where it can.
func (c *Claims) Keyed(ctx context.Context, tx bun.Tx, rd Read, windowed bool, n int) ([]model.Event, error) {
	if windowed {
		return rd.scan(tx.QueryContext(ctx, c.keyedBudget, n, rd.Budget))
	}
	p := &c.prepared.keyedClaim
	stmt := p.in(ctx, tx)
	if stmt == nil {
		return rd.scan(tx.QueryContext(ctx, p.plain, n))
	}
	rows, err := stmt.QueryContext(ctx, n)
	p.failed(err)
	return rd.scan(rows, err)
}

// Queue locks up to limit due unkeyed rows of queues with an id above after (a share of Config.Queues,
// queueClaimFrom) and reads them into rd, as Unkeyed.
func (c *Claims) Queue(ctx context.Context, tx bun.Tx, rd Read, windowed bool, queues []string, after int64, limit int) ([]model.Event, error) {
	if windowed {
		return rd.scan(tx.QueryContext(ctx, c.queueBudget, pgdialect.Array(queues), after, limit, limit, rd.Budget))
	}
	return rd.scan(tx.QueryContext(ctx, c.queue, pgdialect.Array(queues), after, limit, limit))
}

// RestQueues lists the queues with pending unkeyed rows that named does not hold (restQueuesSQL).
func (c *Claims) RestQueues(ctx context.Context, tx bun.Tx, named []string) ([]string, error) {
	var rest []string
	err := tx.NewRaw(c.rest, pgdialect.Array(named)).Scan(ctx, &rest)
	return rest, err
}

// LaneTop is the highest id of a pending unkeyed row in queues, 0 when there is none (laneTopSQL).
func (c *Claims) LaneTop(ctx context.Context, db bun.IDB, queues []string) (int64, error) {
	var top int64
	err := db.NewRaw(c.laneTop, pgdialect.Array(queues)).Scan(ctx, &top)
	return top, err
}

// Due reports whether a due unkeyed row waits to be claimed, in one cheap statement.
func (c *Claims) Due(ctx context.Context, db bun.IDB) (bool, error) {
	var due bool
	err := db.NewRaw(c.due).Scan(ctx, &due)
	return due, err
}

// DueKeyed reports whether a keyed head waits to be claimed.
func (c *Claims) DueKeyed(ctx context.Context, db bun.IDB) (bool, error) {
	var due bool
	err := db.NewRaw(c.dueKeyed).Scan(ctx, &due)
	return due, err
}

// SampleSize returns the size (RowSize) of the largest of the first n pending rows in id order; not
// Valid when none is pending.
func (c *Claims) SampleSize(ctx context.Context, db bun.IDB, n int) (sql.NullInt64, error) {
	var size sql.NullInt64
	err := db.NewRaw(c.sample, n).Scan(ctx, &size)
	return size, err
}

// HoldKeys takes, for each of keys, a transaction-level advisory lock that tx holds until it ends, and
// returns the keys it could not hold: another round holds them, or they have a row in flight once the
// locks are held (in a statement that starts after they were taken, so READ COMMITTED shows every round
// that held them before). Two keys with one hash only wait for each other.
func (c *Claims) HoldKeys(ctx context.Context, tx bun.Tx, keys []string) (map[string]bool, error) {
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
		pgdialect.Array(keys), c.names.LockClass(keyLockClass)); err != nil {
		return nil, fmt.Errorf("lock ordering keys: %w", err)
	}
	if err := scan(c.inFlight, pgdialect.Array(keys)); err != nil {
		return nil, fmt.Errorf("check ordering keys: %w", err)
	}
	return busy, nil
}
