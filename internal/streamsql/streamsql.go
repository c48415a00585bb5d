// Package streamsql holds the SQL that tells the state of a row written while the snapshot cursor is on
// (relay.EnableStream), for every package that reads the outbox: the relay, its reconciler and cleanup,
// bunbox status, the admin and UI views, the metrics.
//
// A streamed row has published_at = 'infinity' and the id of the transaction that wrote it in xid. No
// relay updates it when it is delivered: the relay reads what committed between two snapshots and moves
// the cursor of the row's lane (its queue and slice, see Cursor) past it. So a
// streamed row is delivered when that cursor is past it, and waiting otherwise. A row the stream hands to the per-row path (its enqueue failed, or it has an
// ordering key) leaves the stream: its published_at is NULL again, and it is pending, published or dead
// as every row was before the stream.
//
// The SQL is written with the default table names; tables.Names.SQL rewrites it for a schema and a
// table prefix, as the rest of bunbox's SQL.
package streamsql

// Sentinel is the published_at of a row in the stream, as SQL.
const Sentinel = `'infinity'::timestamptz`

// LaneOf is the name of the cursor row of the lane of a row of outbox_events aliased e: its queue and
// its slice (stream_slice, NULL is slice 0). A lane's cursor row judges the lane's rows; the base row,
// named 'outbox', judges the rows of a lane that has no cursor row yet (see Cursor).
const LaneOf = `'outbox/' || e.queue || '/' || coalesce(e.stream_slice, 0)`

// CursorRows is a subquery for the stream's cursors: each row of bunbox_stream (name, queue, slice; the
// row a stream round locks) with its position, the newest of its rows in bunbox_stream_positions (part,
// seq, snap_from, snap_to, after_xid, after_id, system_id, max_id, moved_at). A move inserts a position
// rather than updating one in place (Moved), and the older positions leave with their partition
// (store.Stream.Rotate): a position read from the top of its cursor's entries in the primary key is found
// first, where a cursor row updated in place was walked through every version of it that a transaction
// holding the xmin horizon kept.
const CursorRows = `(SELECT c.name, c.queue, c.slice, p.part, p.seq, p.snap_from, p.snap_to, p.after_xid, p.after_id,
    p.system_id, p.max_id, p.moved_at
  FROM bunbox_stream c CROSS JOIN LATERAL ` + positionOf + ` p)`

// PositionColumns are the columns of bunbox_stream_positions, in the order Moved's select list gives
// them after the partition, the name and seq.
const PositionColumns = `part, name, seq, snap_from, snap_to, after_xid, after_id, system_id, max_id, moved_at`

// Moved is a statement that gives each cursor c of CursorRows that meets where a new position in c's
// partition, numbered after c's (c.seq + 1), whose snap_from, snap_to, after_xid, after_id, system_id,
// max_id and moved_at are the select list's expressions (over c); it returns the number of cursors
// moved. A cursor is moved by inserting: a position is never updated nor deleted (older ones leave with
// their partition, see CursorRows), and two moves from one position cannot both land (the primary key).
func Moved(selectList, where string) string {
	return `WITH moved AS (INSERT INTO bunbox_stream_positions (` + PositionColumns + `)
  SELECT c.part, c.name, c.seq + 1, ` + selectList + ` FROM ` + CursorRows + ` c WHERE ` + where + `
  RETURNING name)
SELECT count(*) FROM moved`
}

// positionOf is the newest position of the cursor named c.name.
const positionOf = `(SELECT * FROM bunbox_stream_positions sp WHERE sp.name = c.name ORDER BY sp.seq DESC LIMIT 1)`

// Cursor is the join that names the cursor row s that judges each row of outbox_events aliased e (its
// columns snap_from, snap_to, after_xid, after_id, moved_at; all NULL when the stream was never turned
// on), for Delivered and Waiting over many rows: its lane's cursor row (LaneOf), or the base row
// ('outbox') while the lane has none. A lane's cursor row starts as a copy of the base, so a row is judged
// the same before and after its lane's row is created.
//
// Each side reads the cursors once per statement (a subquery the planner may not pull up: OFFSET 0),
// then looks rows up in what it read (a hash), rather than once per row of outbox_events.
//
//	SELECT count(*) FROM outbox_events e <Cursor> WHERE <Waiting>
const Cursor = `LEFT JOIN (SELECT name FROM bunbox_stream OFFSET 0) sl ON sl.name = ` + LaneOf + `
  LEFT JOIN (SELECT * FROM ` + CursorRows + ` cr OFFSET 0) s ON s.name = coalesce(sl.name, 'outbox')`

// RowCursor is Cursor for a subquery that judges one row of outbox_events aliased e, given by the outer
// statement (IsDelivered, IsWaiting): it reads the position of the row's cursor from the top of its
// entries in bunbox_stream_positions' primary key.
//
//	(SELECT <Delivered> FROM (SELECT 1) AS one <RowCursor>)
const RowCursor = `LEFT JOIN LATERAL ` + rowPosition + ` s ON true`

// rowPosition is the newest position of the cursor that judges a row of outbox_events aliased e.
const rowPosition = `(SELECT * FROM bunbox_stream_positions sp WHERE sp.name = ` + cursorName + ` ORDER BY sp.seq DESC LIMIT 1)`

// cursorName is the name of the cursor row that judges a row of outbox_events aliased e (see RowCursor).
// No ORDER BY: the statements that read in an index's order run with enable_sort off (IndexOrderSettings).
const cursorName = `coalesce((SELECT sc.name FROM bunbox_stream sc WHERE sc.name = ` + LaneOf + `), 'outbox')`

// CursorExists is true when the outbox has a cursor row (the stream was turned on once).
const CursorExists = `EXISTS (SELECT 1 FROM bunbox_stream WHERE name = 'outbox')`

// Delivered is true for a row of outbox_events aliased e that is in the stream and that the cursor
// (aliased s, see Cursor) has passed: its transaction committed before the last finished snapshot
// (snap_from), or between it and the one being delivered (snap_to) at or before the position reached in
// it (after_xid, after_id).
const Delivered = `(e.published_at = 'infinity' AND coalesce(pg_visible_in_snapshot(e.xid, s.snap_from)
  OR (s.snap_to IS NOT NULL AND pg_visible_in_snapshot(e.xid, s.snap_to) AND (e.xid, e.id) <= (s.after_xid, s.after_id)), false))`

// Waiting is true for a row of outbox_events aliased e that is in the stream and not yet delivered (see
// Delivered): what the stream still has to enqueue. Its first condition is implied by the rest (a row
// whose transaction is older than snap_from's xmin is visible in snap_from, or was rolled back) and
// bounds the read to outbox_events_stream_idx's newest entries: a count of the waiting rows reads them,
// not every streamed row the retention keeps.
const Waiting = `(e.published_at = 'infinity' AND e.xid >= pg_snapshot_xmin(s.snap_from) AND NOT coalesce(pg_visible_in_snapshot(e.xid, s.snap_from)
  OR (s.snap_to IS NOT NULL AND pg_visible_in_snapshot(e.xid, s.snap_to) AND (e.xid, e.id) <= (s.after_xid, s.after_id)), false))`

// IsDelivered and IsWaiting are Delivered and Waiting as expressions of their own, each with its RowCursor
// join, for a statement that cannot join (an UPDATE's WHERE): true or false, never NULL.
const (
	IsDelivered = `(SELECT ` + Delivered + ` FROM (SELECT 1) AS one ` + RowCursor + `)`
	IsWaiting   = `coalesce((SELECT ` + Waiting + ` FROM (SELECT 1) AS one ` + RowCursor + `), false)`
)

// Enabled is a query for one boolean: whether the stream is on for the outbox, that is whether
// published_at has the stream's default (relay.EnableStream sets it, relay.DisableStream drops it). It
// reads only the catalog, so any role may ask it.
const Enabled = `SELECT EXISTS (SELECT 1 FROM pg_attrdef d
  JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
  WHERE d.adrelid = to_regclass('outbox_events') AND a.attname = 'published_at')`

// Passed is true for a row of outbox_events aliased e that is in the stream and visible in the last
// finished snapshot (snap_from) of the cursor row that judges it (see Cursor): a part of Delivered that
// the index on (xid, id) finds as a range (xid below the greatest xmax of the cursors' snap_from), for
// cleanup. It reads the cursor rows itself (no Cursor join: the bound must be a constant of the statement
// for the index), and is false without one. The rows of the pair being delivered (snap_to) are left out
// until the pair is done.
const Passed = `(e.published_at = 'infinity'
  AND e.xid < (SELECT max(pg_snapshot_xmax(cr.snap_from)) FROM ` + CursorRows + ` cr)
  AND coalesce(pg_visible_in_snapshot(e.xid, (SELECT sb.snap_from FROM ` + rowPosition + ` sb)), false))`

// PublishedAt is the published time of a row of outbox_events aliased e, for showing: its published_at, or
// for a streamed row the cursor's moved_at when the row is delivered (it was delivered at or before then;
// the stream keeps no time per row), NULL while it waits. It needs Cursor.
const PublishedAt = `(CASE WHEN e.published_at = 'infinity' THEN CASE WHEN ` + Delivered + ` THEN s.moved_at END
  ELSE e.published_at END)`

// WaitingRows is a subquery for the streamed rows that wait (see Waiting), whole rows of outbox_events. It
// reads each lane's rows where undelivered ones can be (see waitingOfJ), not from the least xmin of the
// cursors' snapshots: a transaction holding the xmin horizon pins that xmin, and a count from it read
// every row delivered since the transaction began (0.9 s a count after 5 minutes at 1,000 events/s,
// bunbench -sustain-hold-xmin).
//
//	SELECT count(*) FROM <WaitingRows> e
const WaitingRows = `(SELECT w.* FROM (` + judges + `) j CROSS JOIN LATERAL (` + waitingOfJ + `) w)`

// PendingRows is WaitingRows without the cancelled rows: what bunbox status and the metrics count as
// pending besides the per-row path's pending rows.
const PendingRows = `(SELECT p.* FROM ` + WaitingRows + ` p WHERE p.cancelled_at IS NULL)`

// judges is a query for each lane that may hold streamed rows, with the position of the cursor row that
// judges its rows (lq, ls: its queue and slice; snap_from, snap_to, after_xid, after_id; xips, snap_from's
// xip list as an array, which waitingOfJ unnests): every lane's cursor row, and the base row ('outbox') for
// each lane of Lanes that has none yet.
const judges = `SELECT c.queue AS lq, c.slice AS ls, c.snap_from, c.snap_to, c.after_xid, c.after_id,
    ARRAY(SELECT pg_snapshot_xip(c.snap_from)) AS xips
  FROM ` + CursorRows + ` c WHERE c.queue IS NOT NULL
  UNION ALL
  SELECT l.queue, l.slice, b.snap_from, b.snap_to, b.after_xid, b.after_id, ARRAY(SELECT pg_snapshot_xip(b.snap_from))
  FROM ` + CursorRows + ` b, (` + Lanes + `) l WHERE b.name = 'outbox'
    AND NOT EXISTS (SELECT 1 FROM bunbox_stream x WHERE x.name = 'outbox/' || l.queue || '/' || l.slice)`

// waitingOfJ is a query for the waiting rows (see Waiting) of the lane of a row j of judges, whole rows of
// outbox_events, in two ranges of outbox_events_stream_lane_idx: the rows of each transaction in progress
// at snap_from (its xip list), and the rows from snap_from's xmax on; each without the
// rows the open pair has passed. A waiting row is not visible in snap_from, so its transaction was in
// progress then or began after (one that ended before snap_from's xmin and is not visible rolled back).
// snap_from's xmax is where the lane's last finished snapshot ended, however long a transaction holds
// the xmin horizon: the ranges hold the rows since the lane's last round or two, not every row delivered
// since that transaction began. (OFFSET 0 keeps the look for each transaction of the xip list a descent
// of its own: flattened, the planner hashed every row of the lane to join them with the list; and an
// index scan takes the list as an array only as a constant, not from the outer row.)
const waitingOfJ = `SELECT e.* FROM unnest(j.xips) AS x(xid) CROSS JOIN LATERAL (SELECT e.* FROM outbox_events e
    WHERE e.queue = j.lq AND coalesce(e.stream_slice, 0) = j.ls AND e.published_at = 'infinity' AND e.xid = x.xid
      AND NOT ` + passedByJ + ` OFFSET 0) e
  UNION ALL
  SELECT e.* FROM outbox_events e
    WHERE e.queue = j.lq AND coalesce(e.stream_slice, 0) = j.ls AND e.published_at = 'infinity'
      AND e.xid >= pg_snapshot_xmax(j.snap_from) AND NOT ` + passedByJ

// passedByJ is true for a row of outbox_events aliased e that the open pair of the row j of judges has
// passed: visible in snap_to, at or before the position; false with no pair open.
const passedByJ = `coalesce(pg_visible_in_snapshot(e.xid, j.snap_to) AND (e.xid, e.id) <= (j.after_xid, j.after_id), false)`

// BoundingSnapshots is a query for snapshots (snap) such that a streamed row delivered after the
// statement is not visible in at least one of them (none without a cursor row): the statement's snapshot
// S and the last finished snapshot (snap_from) of each cursor row that has rows waiting at S. A cursor
// with rows waiting delivers later only rows not visible in its snap_from, whose xids are at or above its
// xmin; a cursor with none waiting delivers later only rows not visible in S. So an idle lane, whose
// snap_from stays where it last moved, holds back neither the counts of waiting rows nor the reconciler.
// The base row ('outbox') counts for the rows of the lanes that have no cursor row yet (judges). Each
// lane's look stops at its first waiting row, read where waiting rows can be (waitingOfJ), so that a
// transaction holding the xmin horizon does not make it walk the lane's rows delivered since it began.
const BoundingSnapshots = `SELECT j.snap_from AS snap FROM (` + judges + `) j
  WHERE (SELECT 1 FROM (` + waitingOfJ + `) w LIMIT 1) IS NOT NULL
  UNION ALL
  SELECT pg_current_snapshot() WHERE EXISTS (SELECT 1 FROM bunbox_stream)`

// Lanes is a query for the lanes that hold streamed rows (queue, slice), one index descent each on
// outbox_events_stream_lane_idx (a loose index scan: the index holds many rows per lane). It walks the
// index backward, so that each descent lands on the newest row of a lane: cleanup deletes a lane's oldest
// rows, and until VACUUM removes them their entries lead the lane in the index, where a forward descent
// stepped over every one of them (0.66 s a look at 5,000 events/s with 5 minutes kept, once a second).
const Lanes = `WITH RECURSIVE l AS (
  (SELECT queue, coalesce(stream_slice, 0) AS slice FROM outbox_events WHERE published_at = 'infinity'
   ORDER BY queue DESC, coalesce(stream_slice, 0) DESC LIMIT 1)
  UNION ALL
  SELECT n.queue, n.slice FROM l, LATERAL (SELECT queue, coalesce(stream_slice, 0) AS slice FROM outbox_events
    WHERE published_at = 'infinity' AND (queue, coalesce(stream_slice, 0)) < (l.queue, l.slice)
    ORDER BY queue DESC, coalesce(stream_slice, 0) DESC LIMIT 1) n)
SELECT queue, slice FROM l`

// Lag is a query for the cursors' state, for bunbox status: whether a cursor row exists, the streamed
// rows pending (see PendingRows), the age in seconds of the oldest of them (by created_at; 0 when none), the
// oldest transaction whose rows wait (their least xid, as text; NULL when none waits) and the seconds since
// a cursor last moved (0 without a cursor).
//
// The pending rows are read once (the CTE p): PendingRows takes tens of milliseconds to plan.
const Lag = `WITH p AS MATERIALIZED (SELECT e.xid, e.created_at FROM ` + PendingRows + ` e)
SELECT ` + CursorExists + `,
  (SELECT count(*) FROM p),
  coalesce((SELECT extract(epoch FROM clock_timestamp() - min(p.created_at))::float8 FROM p), 0),
  (SELECT min(p.xid)::text FROM p),
  coalesce((SELECT extract(epoch FROM clock_timestamp() - max(cr.moved_at))::float8 FROM ` + CursorRows + ` cr), 0)`

// IndexOrderSettings are the planner settings, as rows of (name, setting) for set_config, under which a
// statement that asks for the next rows in an index's order (ORDER BY the index's columns LIMIT n) reads
// them from that index whatever the statistics say, and is not compiled: no bitmap scan, no sort, no JIT.
// After an ANALYZE that sampled few of the newest rows of a large table the planner took them for a few
// and chose a bitmap scan and a sort of all of them, at each read; and with 10 M rows kept its estimates
// passed jit_above_cost, so each read of a reconciler's page was compiled first: 18 ms a page on average
// against 2.3 on an empty table (pg_stat_statements, the keptdrain bench), for a few buffers each. The
// stream's rounds and the reconciler's pages of streamed rows read with them.
const IndexOrderSettings = "('jit', 'off'), ('enable_bitmapscan', 'off'), ('enable_sort', 'off')"
