package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
)

// The stream's lanes (migration 20261210000001): a lane is a queue and a slice of it (outbox_events'
// stream_slice, NULL is 0), with its own cursor row in bunbox_stream, named as streamsql.LaneOf names it.
// A lane's cursor row starts as a copy of the base row ('outbox'), which judges the lanes that have none
// (streamsql.Cursor): the lane's rows are some of the rows the base judged, so the base's pair and
// position, kept to them, are a valid cursor of the lane, and a row is judged the same before and after.

// readLanesSQL reads the lanes' cursor rows.
const readLanesSQL = `SELECT name, queue, slice, snap_from::text, snap_to::text, after_xid::text, after_id
FROM bunbox_stream WHERE queue IS NOT NULL ORDER BY name`

// lanesWithRowsSQL lists the lanes that hold streamed rows, one index descent each on
// outbox_events_stream_lane_idx (a loose index scan: the index holds many rows per lane).
const lanesWithRowsSQL = `WITH RECURSIVE l AS (
  (SELECT queue, coalesce(stream_slice, 0) AS slice FROM outbox_events WHERE published_at = 'infinity'
   ORDER BY queue, coalesce(stream_slice, 0) LIMIT 1)
  UNION ALL
  SELECT n.queue, n.slice FROM l, LATERAL (SELECT queue, coalesce(stream_slice, 0) AS slice FROM outbox_events
    WHERE published_at = 'infinity' AND (queue, coalesce(stream_slice, 0)) > (l.queue, l.slice)
    ORDER BY queue, coalesce(stream_slice, 0) LIMIT 1) n)
SELECT queue, slice FROM l`

// missingLanesSQL reports whether a lane holds streamed rows and has no cursor row, while the base row
// exists (the stream was turned on).
const missingLanesSQL = `SELECT EXISTS (SELECT 1 FROM (` + lanesWithRowsSQL + `) l
  WHERE EXISTS (SELECT 1 FROM bunbox_stream WHERE name = 'outbox')
    AND NOT EXISTS (SELECT 1 FROM bunbox_stream s WHERE s.name = 'outbox/' || l.queue || '/' || l.slice))`

// addLanesSQL creates, as copies of the base row, the cursor rows of the lanes that hold streamed rows and
// of the lanes of the queues ?0 with the slices 0 to ?1-1, unless they exist. It runs in the transaction
// that holds the base row (Stream.AddLanes).
const addLanesSQL = `INSERT INTO bunbox_stream (name, queue, slice, snap_from, snap_to, after_xid, after_id, moved_at,
  system_id, max_id)
SELECT 'outbox/' || l.queue || '/' || l.slice, l.queue, l.slice, b.snap_from, b.snap_to, b.after_xid, b.after_id,
  b.moved_at, b.system_id, b.max_id
FROM (` + lanesWithRowsSQL + `
  UNION SELECT q, s::smallint FROM unnest(?0::text[]) AS q, generate_series(0, ?1 - 1) AS s) l,
  bunbox_stream b
WHERE b.name = 'outbox'
ON CONFLICT (name) DO NOTHING`

// moveBaseSQL moves the base row to the snapshot ?0, taken before addLanesSQL ran: every streamed row
// visible in it is in a lane that has a cursor row now (addLanesSQL's read came after it and saw at least
// as much), so the base judges no row visible in it, and a lane created later starts at it. Its rows
// are in transactions that were running at ?0 or began after it: waiting, for the base and the copy.
const moveBaseSQL = `UPDATE bunbox_stream SET snap_from = ?0::pg_snapshot, snap_to = NULL, after_xid = NULL,
  after_id = NULL WHERE name = 'outbox'`

// handOverUnlanedSQL gives the rows waiting in a lane with no cursor row (judged by the base) to the
// per-row path, for a role that may not create the lanes' cursor rows (no INSERT on bunbox_stream): they
// are pending rows from then on. Its one argument is the cancel result of the cancelled rows it hands over.
const handOverUnlanedSQL = `UPDATE outbox_events e ` + handOverWaitingSet + `
FROM (` + lanesWithRowsSQL + `) l
WHERE NOT EXISTS (SELECT 1 FROM bunbox_stream s WHERE s.name = 'outbox/' || l.queue || '/' || l.slice)
  AND e.queue = l.queue AND coalesce(e.stream_slice, 0) = l.slice AND e.published_at = 'infinity'
  AND ` + streamsql.IsWaiting

// MayAddLanes reports whether the role may create the lanes' cursor rows (INSERT on bunbox_stream).
func (s *Stream) MayAddLanes(ctx context.Context, db bun.IDB) (bool, error) {
	var may bool
	err := db.QueryRowContext(ctx, s.names.SQL(`SELECT coalesce(has_table_privilege(to_regclass('bunbox_stream'), 'INSERT'), false)`)).Scan(&may)
	return may, err
}

// HandOverUnlaned gives the rows waiting in lanes with no cursor row to the per-row path
// (handOverUnlanedSQL), in tx, which holds the base row, and moves the base row on (moveBaseSQL: no
// streamed row visible in snap is left for it to judge). It returns how many rows it handed over.
func (s *Stream) HandOverUnlaned(ctx context.Context, tx bun.Tx, snap, cancelResult string) (int64, error) {
	res, err := tx.ExecContext(ctx, s.names.SQL(handOverUnlanedSQL), cancelResult)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	_, err = tx.ExecContext(ctx, s.names.SQL(moveBaseSQL), snap)
	return n, err
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
	res, err := tx.ExecContext(ctx, s.addLanes, pgdialect.Array(queues), slices)
	if err != nil {
		return 0, err
	}
	added, _ = res.RowsAffected()
	_, err = tx.ExecContext(ctx, s.names.SQL(moveBaseSQL), snap)
	return added, err
}

// LockAll waits in tx for every cursor row (the base first, then the lanes by name): no stream round
// runs until tx ends. It is the lock ResetCursor needs.
func (s *Stream) LockAll(ctx context.Context, tx bun.Tx) error {
	_, err := tx.ExecContext(ctx, s.names.SQL(`SELECT 1 FROM bunbox_stream ORDER BY name = 'outbox' DESC, name FOR UPDATE`))
	return err
}

// topSQL is the greatest xid among the streamed rows of the lane ?0, ?1 (one backward descent of
// outbox_events_stream_lane_idx), NULL when it has none.
const topSQL = `(SELECT max(xid)::text FROM outbox_events WHERE published_at = 'infinity' AND queue = ?0
  AND coalesce(stream_slice, 0) = ?1)`

// Tops reads, for each lane of cs, the greatest xid among its streamed rows ("" when none), in one
// statement: a cheap look for new rows in a few lanes (the round of quiet queues).
func (s *Stream) Tops(ctx context.Context, db bun.IDB, cs []Cursor) ([]string, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	parts := make([]string, len(cs))
	args := make([]any, 0, 2*len(cs))
	for i, c := range cs {
		parts[i] = strings.NewReplacer("?0", "?"+strconv.Itoa(2*i), "?1", "?"+strconv.Itoa(2*i+1)).Replace(topSQL)
		args = append(args, c.Queue, c.Slice)
	}
	tops := make([]sql.NullString, len(cs))
	dest := make([]any, len(cs))
	for i := range tops {
		dest[i] = &tops[i]
	}
	if err := db.QueryRowContext(ctx, s.names.SQL("SELECT "+strings.Join(parts, ", ")), args...).Scan(dest...); err != nil {
		return nil, err
	}
	out := make([]string, len(cs))
	for i, t := range tops {
		out[i] = t.String
	}
	return out, nil
}
