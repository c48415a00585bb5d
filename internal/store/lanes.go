package store

import (
	"context"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
)

// The stream's lanes (migration 20261210000001): a lane is a queue and a slice of it (outbox_events'
// stream_slice, NULL is 0), with its own cursor row in bunbox_stream, named as streamsql.LaneOf names it.
// A lane's cursor row starts as a copy of the base row ('outbox'), which judges the lanes that have none
// (streamsql.Cursor): the lane's rows are some of the rows the base judged, so the base's pair and
// position, kept to them, are a valid cursor of the lane, and a row is judged the same before and after.

// LanesDueSQL reads the lanes' cursor rows c and, for each, whether streamed rows wait for it, in three
// parts, each a range of outbox_events_stream_lane_idx over the lane's rows that starts where its
// undelivered rows can begin, never at the delivered rows the retention keeps nor at those of the open pair
// the cursor has passed:
//   - the rows of a transaction running at snap_from (its xip list), not passed in the open pair;
//   - the rows of a transaction running at snap_to that began after snap_from (not in the open pair at
//     all; none with no pair open);
//   - from the greater of snap_from's xmax and the position's xid on, the rows not passed in the open pair,
//     or with no pair open every row of a transaction begun after snap_from. In the position's transaction
//     it starts after the position (a row comparison on the index's columns), so that it does not walk the
//     rows of a large transaction the pair has passed.
//
// A row is passed when it is visible in snap_to and at or before the position (lanePassed). Cancelled rows
// count too: the stream settles their cancels as it passes them.
//
// The cursor row's columns are the keys of each part's index scan, at run time (the inner side of a nested
// loop; an xip list is a set the scan is repeated for, one descent per transaction in it): one statement
// planned once whatever the number of lanes. Written out with constants per lane, it took about a
// millisecond of planning per lane, 37 ms a look at 12 lanes. Each part is a scalar subquery that asks for
// its first row in the index's order (ORDER BY ... LIMIT 1), so that the planner walks the index whatever
// the statistics say: an EXISTS loses its ORDER BY and LIMIT to the planner, and after an ANALYZE that
// counted many rows past the position it was planned as a sequential scan that walks every row kept before
// the first one due (in the drain bench, 9 ms a check); the ORDER BY names the lane's columns, which in
// (xid, id) order made the planner take the index on (xid, id) and walk the other lanes' rows.
const LanesDueSQL = `SELECT c.name, c.queue, c.slice, c.snap_from::text, c.snap_to::text, c.after_xid::text, c.after_id,
  (SELECT 1 FROM pg_snapshot_xip(c.snap_from) AS x(xid), LATERAL (SELECT 1 FROM outbox_events e
    WHERE ` + laneOfC + ` AND e.xid = x.xid
      AND e.id > CASE WHEN x.xid = c.after_xid THEN c.after_id ELSE -9223372036854775807 END AND NOT ` + lanePassed + `
    ORDER BY e.queue, coalesce(e.stream_slice, 0), e.xid, e.id LIMIT 1) r LIMIT 1) IS NOT NULL
  OR (SELECT 1 FROM pg_snapshot_xip(c.snap_to) AS x(xid), LATERAL (SELECT 1 FROM outbox_events e
    WHERE ` + laneOfC + ` AND e.xid = x.xid
    ORDER BY e.queue, coalesce(e.stream_slice, 0), e.xid, e.id LIMIT 1) r
    WHERE x.xid >= pg_snapshot_xmax(c.snap_from) LIMIT 1) IS NOT NULL
  OR (SELECT 1 FROM outbox_events e
    WHERE ` + laneOfC + ` AND (e.xid, e.id) > (v.start_xid, v.start_id) AND NOT ` + lanePassed + `
    ORDER BY e.queue, coalesce(e.stream_slice, 0), e.xid, e.id LIMIT 1) IS NOT NULL
FROM ` + streamsql.CursorRows + ` c, LATERAL (SELECT greatest(pg_snapshot_xmax(c.snap_from), c.after_xid) AS start_xid,
    CASE WHEN c.snap_to IS NOT NULL AND c.after_xid >= pg_snapshot_xmax(c.snap_from) THEN c.after_id
      ELSE -9223372036854775807 END AS start_id) v
WHERE c.queue IS NOT NULL
ORDER BY c.name`

// laneOfC keeps a read of outbox_events aliased e to the streamed rows of the lane of the cursor row c.
const laneOfC = `e.queue = c.queue AND coalesce(e.stream_slice, 0) = c.slice AND e.published_at = 'infinity'`

// lanePassed is true for a row of outbox_events aliased e that the open pair of the cursor row c has
// passed (see LanesDueSQL), false with no pair open.
const lanePassed = `coalesce(pg_visible_in_snapshot(e.xid, c.snap_to) AND (e.xid, e.id) <= (c.after_xid, c.after_id), false)`

// missingLanesSQL reports whether a lane holds streamed rows and has no cursor row, while the base row
// exists (the stream was turned on).
const missingLanesSQL = `SELECT EXISTS (SELECT 1 FROM (` + streamsql.Lanes + `) l
  WHERE EXISTS (SELECT 1 FROM bunbox_stream WHERE name = 'outbox')
    AND NOT EXISTS (SELECT 1 FROM bunbox_stream s WHERE s.name = 'outbox/' || l.queue || '/' || l.slice))`

// addLanesSQL creates, with positions copied from the base's, the cursor rows of the lanes that hold
// streamed rows and of the lanes of the queues ?0 with the slices 0 to ?1-1, unless they exist; it
// returns how many it created. It runs in the transaction that holds the base row (Stream.AddLanes).
const addLanesSQL = `WITH added AS (INSERT INTO bunbox_stream (name, queue, slice)
  SELECT 'outbox/' || l.queue || '/' || l.slice, l.queue, l.slice
  FROM (` + streamsql.Lanes + `
    UNION SELECT q, s::smallint FROM unnest(?0::text[]) AS q, generate_series(0, ?1 - 1) AS s) l
  WHERE EXISTS (SELECT 1 FROM bunbox_stream WHERE name = 'outbox')
  ON CONFLICT (name) DO NOTHING RETURNING name),
copied AS (INSERT INTO bunbox_stream_positions (` + streamsql.PositionColumns + `)
  SELECT b.part, a.name, ` + nextSeq + `, b.snap_from, b.snap_to, b.after_xid, b.after_id, b.system_id, b.max_id, b.moved_at
  FROM added a, ` + streamsql.CursorRows + ` b WHERE b.name = 'outbox' RETURNING name)
SELECT count(*) FROM copied`

// moveBaseSQL moves the base cursor to the snapshot ?, taken before addLanesSQL ran: every streamed row
// visible in it is in a lane that has a cursor row now (addLanesSQL's read came after it and saw at least
// as much), so the base judges no row visible in it, and a lane created later starts at it. Its rows
// are in transactions that were running at ? or began after it: waiting, for the base and the copy.
var moveBaseSQL = streamsql.Moved(`?::pg_snapshot, NULL, NULL, NULL, c.system_id, c.max_id, c.moved_at`, `c.name = 'outbox'`)

// handOverUnlanedSQL gives the rows waiting in a lane with no cursor row (judged by the base) to the
// per-row path, for a role that may not create the lanes' cursor rows (no INSERT on bunbox_stream): they
// are pending rows from then on. Its one argument is the cancel result of the cancelled rows it hands over.
const handOverUnlanedSQL = `UPDATE outbox_events e ` + handOverWaitingSet + `
FROM (` + streamsql.Lanes + `) l
WHERE NOT EXISTS (SELECT 1 FROM bunbox_stream s WHERE s.name = 'outbox/' || l.queue || '/' || l.slice)
  AND e.queue = l.queue AND coalesce(e.stream_slice, 0) = l.slice AND e.published_at = 'infinity'
  AND ` + streamsql.IsWaiting

// MayAddLanes reports whether the role may create the lanes' cursor rows (INSERT on bunbox_stream), and
// whether it may move cursors (INSERT on bunbox_stream_positions).
func (s *Stream) MayAddLanes(ctx context.Context, db bun.IDB) (lanes, moves bool, err error) {
	err = db.QueryRowContext(ctx, s.names.SQL(`SELECT
  coalesce(has_table_privilege(to_regclass('bunbox_stream'), 'INSERT'), false),
  coalesce(has_table_privilege(to_regclass('bunbox_stream_positions'), 'INSERT'), false)`)).Scan(&lanes, &moves)
	return lanes, moves, err
}

// HandOverUnlaned gives the rows waiting in lanes with no cursor row to the per-row path
// (handOverUnlanedSQL), in tx, which holds the base row, and, when move, moves the base row on
// (moveBaseSQL: no streamed row visible in snap is left for it to judge; a role that may not move
// cursors leaves it, and hands the same rows over again, none of them waiting any more). It returns how
// many rows it handed over.
func (s *Stream) HandOverUnlaned(ctx context.Context, tx bun.Tx, snap, cancelResult string, move bool) (int64, error) {
	res, err := tx.ExecContext(ctx, s.names.SQL(handOverUnlanedSQL), cancelResult)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if move {
		_, err = tx.ExecContext(ctx, s.moveBase, snap)
	}
	return n, err
}

// LanesDue reads the lanes' cursor rows, by name, and whether a stream round may find rows to deliver in
// each (LanesDueSQL), in one statement: a look that costs an index descent or three per lane.
func (s *Stream) LanesDue(ctx context.Context, db bun.IDB) ([]Cursor, []bool, error) {
	rows, err := db.QueryContext(ctx, s.lanesDue)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var cs []Cursor
	var due []bool
	for rows.Next() {
		var c Cursor
		var d bool
		if err := rows.Scan(&c.Name, &c.Queue, &c.Slice, &c.From, &c.To, &c.AfterXid, &c.AfterID, &d); err != nil {
			return nil, nil, err
		}
		cs, due = append(cs, c), append(due, d)
	}
	return cs, due, rows.Err()
}

// MissingLanes reports whether a lane holds streamed rows and has no cursor row yet (missingLanesSQL).
func (s *Stream) MissingLanes(ctx context.Context, db bun.IDB) (bool, error) {
	var missing bool
	err := db.QueryRowContext(ctx, s.lanes).Scan(&missing)
	return missing, err
}

// AddLanes creates the lanes' cursor rows (addLanesSQL) for the lanes with streamed rows and for the
// queues given with slices 0 to slices-1, and moves the base row on (moveBaseSQL), in tx, which holds the
// base row (LockCursor) and took snap, its current snapshot, right after it locked it.
func (s *Stream) AddLanes(ctx context.Context, tx bun.Tx, snap string, queues []string, slices int) (added int64, err error) {
	if err := tx.QueryRowContext(ctx, s.addLanes, pgdialect.Array(queues), slices).Scan(&added); err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, s.moveBase, snap)
	return added, err
}

// LockAll waits in tx for every cursor row (the base first, then the lanes by name): no stream round
// runs until tx ends. It is the lock ResetCursor needs.
func (s *Stream) LockAll(ctx context.Context, tx bun.Tx) error {
	_, err := tx.ExecContext(ctx, s.names.SQL(`SELECT 1 FROM bunbox_stream ORDER BY name = 'outbox' DESC, name FOR UPDATE`))
	return err
}
