package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// Cursor is a cursor of the stream as a stream round holds it: its lane (Name, Queue, Slice; the base
// cursor is named 'outbox', with no queue), the number of its position (Seq, see streamsql.CursorRows),
// the pair of snapshots being delivered (From, To) and the position reached in it (AfterXid, AfterID),
// all in PostgreSQL's text forms.
type Cursor struct {
	Name, Queue string
	Slice       int
	Seq         int64
	From, To    sql.NullString // To: NULL when no pair is open
	AfterXid    sql.NullString
	AfterID     sql.NullInt64
	// The cluster the cursor was written on (system_id) and the one the round runs on (System), and the
	// xmax of the snapshot the cursor was read in: see the relay's stream_cluster.go.
	CursorSystem, System sql.NullInt64
	Xmax                 string
}

// LockCursorSQL locks the base cursor row ('outbox'), unless another transaction holds it.
const LockCursorSQL = `SELECT name FROM bunbox_stream WHERE name = 'outbox' FOR UPDATE SKIP LOCKED`

// LockLaneSQL locks the first lane of the names ?0, in their order, that no other stream round holds.
const LockLaneSQL = `SELECT name FROM bunbox_stream WHERE name = ANY(?0::text[]) AND queue IS NOT NULL
ORDER BY array_position(?0::text[], name) LIMIT 1 FOR UPDATE SKIP LOCKED`

// readCursorSQL reads the cursor named ? once its row is locked, in a statement of its own: its snapshot
// is taken after the commit of the round that held the row before, so it reads the position that round
// wrote (the lock statement's snapshot may predate it: a row only locked, never updated, is not read
// again when its lock is granted), and the cluster the round runs on.
const readCursorSQL = `SELECT c.name, coalesce(c.queue, ''), coalesce(c.slice, 0), p.seq, p.snap_from::text,
  p.snap_to::text, p.after_xid::text, p.after_id, p.system_id,
  (SELECT system_identifier FROM pg_control_system()), pg_snapshot_xmax(pg_current_snapshot())::text
FROM bunbox_stream c CROSS JOIN LATERAL (SELECT * FROM bunbox_stream_positions sp WHERE sp.name = c.name
  ORDER BY sp.seq DESC LIMIT 1) p
WHERE c.name = ?`

// streamReadPart is one half of the stream's read: the rows of the pair (from, to) after the position
// (xid, id), in (xid, id) order, up to the limit. Arguments: from, to, the least xid to read (the
// position's, or 0 at the pair's start), the position's xid and id, the limit. The half written for xidCond
// is either the transactions that were running at from (their xids are below from's xmax) or those that
// began after it; a transaction still running at to is not in the pair, and its rows wait for the next one.
//
// The position is a filter, not the index's bound: a row comparison (xid, id) > (…) beside xidCond made
// the btree scan start at the row comparison, that is at the index's first entry at a pair's start, and
// walk every delivered streamed row the retention keeps before it reached the pair. The bounds of xidCond
// and the least xid are scalars on the index's first column, where the scan starts.
func streamReadPart(xidCond string) string {
	return `(SELECT ` + Columns + `, ` + RowSize + ` AS row_size, xid AS stream_xid,
  cancelled_at IS NOT NULL AS cancelled, cancelled_at IS NOT NULL AND cancel_settled_at IS NULL AS unsettled
FROM outbox_events
WHERE ` + xidCond + `
  AND published_at = ` + streamsql.Sentinel + `
  AND pg_visible_in_snapshot(xid, ?1::pg_snapshot)
  AND (xid > ?3::xid8 OR (xid = ?3::xid8 AND id > ?4::bigint))
  AND queue = ?7 AND coalesce(stream_slice, 0) = ?8
ORDER BY queue, coalesce(stream_slice, 0), xid, id
LIMIT ?5)`
}

// StreamReadSQL reads the next rows of the pair, PgQ's way: the rows of the transactions that committed
// between the two snapshots, that is those running at from (from's xip list) or begun after it (from's xmax
// on) and visible in to. A transaction that stays open does not hold the stream back, and the rows already
// delivered are not read again: each half walks outbox_events_stream_idx from where the pair's rows begin,
// or from the position once the round has one. from's xip list comes as a constant array (?6, see
// SnapshotXip): an array the statement computes (ARRAY(SELECT pg_snapshot_xip(…))) is unknown to the
// planner, which then scans the table for it. Every xid of the first half is below every xid of the
// second (from's xmax), so the halves, each cut at the limit, come in order. A cancelled row is read too,
// so that the round settles its cancel as it passes it, but never enqueued.
//
// This text is for a position before the second half (none, or in from's xip list): the second half
// starts at from's xmax. StreamReadAfterSQL is for a position in the second half.
var StreamReadSQL = streamReadPair(`xid >= pg_snapshot_xmax(?0::pg_snapshot)`)

// StreamReadAfterSQL is StreamReadSQL for a position in the second half: that half's scan starts at the
// position itself, a row comparison on the index's columns and the only lower bound there, so that it
// does not first walk the rows of the position's transaction it has passed (with a scalar bound at the
// position's xid it did: up to a batch of rows filtered out per read when transactions write many events).
var StreamReadAfterSQL = streamReadPair(`(xid, id) > (?3::xid8, ?4::bigint)`)

func streamReadPair(secondFrom string) string {
	return streamReadPart(`xid = ANY(?6::xid8[]) AND xid >= ?2::xid8`) + `
UNION ALL
` + streamReadPart(secondFrom+` AND xid < pg_snapshot_xmax(?1::pg_snapshot)`) + `
ORDER BY stream_xid, id
LIMIT ?5`
}

// moveCursorSQL writes the cursor's new place: the pair (from, to) and the position in it, and raises
// max_id to the largest id of the rows the round read. Arguments: from, to, the position's xid and id
// (NULL when no pair is open), the largest id read (NULL: none), the cursor's name and the seq of the
// position the round read.
var moveCursorSQL = streamsql.Moved(`?::pg_snapshot, ?::pg_snapshot, ?::xid8, ?::bigint, c.system_id,
  greatest(c.max_id, ?::bigint), now()`, `c.name = ? AND c.seq = ?`)

// catalogSQL reads whether the stream is on and whether the cursor's table exists.
const catalogSQL = `SELECT (` + streamsql.Enabled + `), to_regclass('bunbox_stream') IS NOT NULL`

// beforeEveryID is an id before every row (MinInt64 itself would not parse as -9223372036854775808::bigint).
const beforeEveryID = int64(math.MinInt64 + 1)

// Stream runs the snapshot stream's statements on one outbox's tables: the cursor's lock, read and move,
// the read of the rows to deliver, the check for rows due, the cursor's reset on another cluster.
type Stream struct {
	names                                              tables.Names
	lock, wait, lockLane, readCursor, read, readAfter  string
	move, catalog, lanes, addLanes, lanesDue, moveBase string
}

// NewStream returns the stream statements of names's outbox.
func NewStream(names tables.Names) *Stream {
	return &Stream{names: names, lock: names.SQL(LockCursorSQL),
		wait:     names.SQL(strings.Replace(LockCursorSQL, "SKIP LOCKED", "", 1)),
		lockLane: names.SQL(LockLaneSQL), readCursor: names.SQL(readCursorSQL), moveBase: names.SQL(moveBaseSQL),
		read: names.SQL(StreamReadSQL), readAfter: names.SQL(StreamReadAfterSQL),
		lanes: names.SQL(missingLanesSQL), addLanes: names.SQL(addLanesSQL),
		lanesDue: names.SQL(LanesDueSQL),
		move:     names.SQL(moveCursorSQL), catalog: names.SQL(catalogSQL)}
}

// Catalog returns whether the stream is on for the outbox and whether the cursor's table exists.
func (s *Stream) Catalog(ctx context.Context, db bun.IDB) (on, cursor bool, err error) {
	err = db.NewRaw(s.catalog).Scan(ctx, &on, &cursor)
	return on, cursor, err
}

// LockCursor locks the base cursor row in tx and reads the cursor; ok is false when another transaction
// holds it (or there is no cursor row). wait waits for the row rather than skipping it (EnableStream,
// DisableStream).
func (s *Stream) LockCursor(ctx context.Context, tx bun.Tx, wait bool) (c Cursor, ok bool, err error) {
	query := s.lock
	if wait {
		query = s.wait
	}
	return s.locked(ctx, tx, tx.QueryRowContext(ctx, query))
}

// LockLane locks in tx the first lane of names, in their order, that no other stream round holds, and
// reads its cursor; ok is false when every one is held (or none exists).
func (s *Stream) LockLane(ctx context.Context, tx bun.Tx, names []string) (c Cursor, ok bool, err error) {
	return s.locked(ctx, tx, tx.QueryRowContext(ctx, s.lockLane, pgdialect.Array(names)))
}

// locked reads, once row (a lock statement's) has named the cursor row it locked, its cursor
// (readCursorSQL).
func (s *Stream) locked(ctx context.Context, tx bun.Tx, row *sql.Row) (c Cursor, ok bool, err error) {
	var name string
	if err := row.Scan(&name); err != nil {
		if err == sql.ErrNoRows {
			return c, false, nil
		}
		return c, false, err
	}
	err = tx.QueryRowContext(ctx, s.readCursor, name).Scan(&c.Name, &c.Queue, &c.Slice, &c.Seq, &c.From, &c.To,
		&c.AfterXid, &c.AfterID, &c.CursorSystem, &c.System, &c.Xmax)
	if err == sql.ErrNoRows {
		return c, false, fmt.Errorf("the stream's cursor %s has no position in %s", name, s.names.Qualify("bunbox_stream_positions"))
	}
	return c, err == nil, err
}

// CurrentSnapshot reads pg_current_snapshot() in a statement of its own: run after the cursor row is
// locked, it is taken after the commit of the stream round that held the row before, so a pair it closes
// never ends before it begins.
func (s *Stream) CurrentSnapshot(ctx context.Context, tx bun.Tx) (string, error) {
	var snap string
	err := tx.QueryRowContext(ctx, "SELECT pg_current_snapshot()::text").Scan(&snap)
	return snap, err
}

// StreamRow is what a read of the stream returns of a row besides the event: its xid, and whether its
// cancel had committed (cancelled) and is not settled yet (unsettled).
type StreamRow struct {
	Xid                  string
	Cancelled, Unsettled bool
}

// Read reads up to limit rows of c's pair after c's position (StreamReadSQL) into rd, no more than rd's
// budget bytes unless the first row alone is larger, and calls row for each row kept with what the stream
// read of it. full reports that more rows of the pair may follow: the read was cut at the limit or the
// budget.
func (s *Stream) Read(ctx context.Context, tx bun.Tx, c Cursor, limit int, rd Read, row func(i int, r *StreamRow)) (
	_ []model.Event, full bool, err error,
) {
	afterXid, afterID := "0", beforeEveryID
	if c.AfterXid.Valid && c.AfterID.Valid {
		afterXid, afterID = c.AfterXid.String, c.AfterID.Int64
	}
	query := s.read
	if c.AfterXid.Valid && !XidLess(c.AfterXid.String, SnapshotXmax(c.From.String)) {
		query = s.readAfter
	}
	rows, err := tx.QueryContext(ctx, query, c.From.String, c.To.String, afterXid, afterXid, afterID,
		limit, SnapshotXip(c.From.String), c.Queue, c.Slice)
	if err != nil {
		return nil, false, err
	}
	var sr StreamRow // the read's own columns, the same destinations for every row
	first := len(rd.Events)
	events, cut, err := Scan(rows, rd.Events, rd.Budget, []any{&sr.Xid, &sr.Cancelled, &sr.Unsettled},
		func(i int, ev *model.Event, metadata []byte) {
			rd.Kept(i, ev, metadata)
			row(i, &sr)
		})
	if err != nil {
		return nil, false, err
	}
	return events, cut || len(events)-first >= limit, nil
}

// MoveCursor moves the cursor of tx's round to the position (xid, id) in its pair, or past the pair when
// done, and records maxID (the largest id the round read; 0: none). The round then commits.
func (s *Stream) MoveCursor(ctx context.Context, tx bun.Tx, cur Cursor, xid string, id int64, done bool, maxID int64) error {
	var most any
	if maxID > 0 {
		most = maxID
	}
	args := []any{cur.From.String, cur.To.String, xid, id, most, cur.Name, cur.Seq}
	if done {
		args = []any{cur.To.String, nil, nil, nil, most, cur.Name, cur.Seq}
	}
	var moved int
	if err := tx.QueryRowContext(ctx, s.move, args...).Scan(&moved); err != nil {
		return err
	}
	if moved != 1 {
		return fmt.Errorf("the stream's cursor %s moved from position %d by another transaction", cur.Name, cur.Seq)
	}
	return nil
}

// Reset is what Stream.ResetCursor did.
type Reset struct {
	HandedOver, Published int64
	MarksKept             bool // the role may not delete the reconciler's time marks
}

// handOverWaitingSet is the SET of an UPDATE of outbox_events e that hands streamed rows to the per-row
// path: pending rows from then on. A row cancelled while it waited was never enqueued: its cancel is
// settled as bunx settles a pending row's (its result is the UPDATE's one argument).
const handOverWaitingSet = `SET published_at = NULL,
  cancel_settled_at = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL THEN now() ELSE e.cancel_settled_at END,
  cancel_result = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL THEN ? ELSE e.cancel_result END,
  completed_at = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL AND e.ordering_key IS NOT NULL
    THEN coalesce(e.completed_at, now()) ELSE e.completed_at END`

// resetSQL are ResetCursor's statements, in order: the lock that keeps writers out (their rows would be
// written between the reads of the old cursor and the new one's snapshot); the hand-over of every streamed
// row the old cursor did not deliver, or whose delivery it cannot vouch for (an id past max_id); the
// delivered rows whose xid the new cursor could take for waiting leave the stream as published at their
// cursor's last move; every cursor, the base and the lanes', starts at a snapshot of this cluster (a
// new position each). Each row is judged by its lane's cursor (streamsql.RowCursor). (ResetCursor then
// deletes the reconciler's time marks of the old id space, when the role may.)
var resetSQL = []string{
	`LOCK TABLE outbox_events IN SHARE ROW EXCLUSIVE MODE`,
	`UPDATE outbox_events e ` + handOverWaitingSet + `
WHERE ` + streamsql.CursorExists + ` AND e.published_at = ` + streamsql.Sentinel + `
  AND NOT (SELECT e.id <= coalesce(s.max_id, 0) AND ` + streamsql.Delivered + ` FROM (SELECT 1) AS one ` + streamsql.RowCursor + `)`,
	`UPDATE outbox_events e SET published_at = (SELECT s.moved_at FROM (SELECT 1) AS one ` + streamsql.RowCursor + `)
WHERE ` + streamsql.CursorExists + ` AND e.published_at = ` + streamsql.Sentinel + `
  AND e.xid >= pg_snapshot_xmin(pg_current_snapshot())`,
	streamsql.Moved(`pg_current_snapshot(), NULL, NULL, NULL, (SELECT system_identifier FROM pg_control_system()),
  (SELECT max(id) FROM outbox_events), now()`, `true`),
}

// ResetCursor starts the cursors anew in tx, which holds every cursor row (LockAll; see resetSQL), waiting at most
// lockTimeout (PostgreSQL's text, "5s") for the outbox table's lock; cancelResult is the cancel result of
// the cancelled rows it hands over.
func (s *Stream) ResetCursor(ctx context.Context, tx bun.Tx, lockTimeout, cancelResult string) (n Reset, err error) {
	if _, err := tx.ExecContext(ctx, "SELECT set_config('lock_timeout', '"+lockTimeout+"', true)"); err != nil {
		return n, err
	}
	for i, query := range resetSQL {
		var args []any
		if i == 1 {
			args = []any{cancelResult}
		}
		res, err := tx.ExecContext(ctx, s.names.SQL(query), args...)
		if err != nil {
			return n, err
		}
		switch i {
		case 1:
			n.HandedOver, _ = res.RowsAffected()
		case 2:
			n.Published, _ = res.RowsAffected()
		}
	}
	// A time mark pairs a time with a next xid of the old id space, where the reconciler would start its
	// read of the stream too late. A role that may not delete them (the reconciler's marks are optional)
	// leaves them to expire after TaskRetention, and says so.
	var may bool
	if err := tx.QueryRowContext(ctx, s.names.SQL(`SELECT coalesce(has_table_privilege(to_regclass('bunbox_stream_marks'), 'DELETE'), false)`)).Scan(&may); err != nil {
		return n, err
	}
	if !may {
		n.MarksKept = true
		return n, nil
	}
	_, err = tx.ExecContext(ctx, s.names.SQL(`DELETE FROM bunbox_stream_marks`))
	return n, err
}

// enableSQL and disableSQL turn the stream on and off: a row written while it is on carries the id of
// its transaction and waits in the stream (published_at 'infinity').
const (
	enableSQL = `ALTER TABLE outbox_events
  ALTER COLUMN xid SET DEFAULT pg_current_xact_id(),
  ALTER COLUMN published_at SET DEFAULT ` + streamsql.Sentinel
	disableSQL = `ALTER TABLE outbox_events
  ALTER COLUMN xid DROP DEFAULT,
  ALTER COLUMN published_at DROP DEFAULT`
)

// Switch turns the stream on or off in tx (enableSQL, disableSQL), waiting at most lockTimeout
// (PostgreSQL's text, "5s") for the outbox table's lock. alterErr wraps the error of the ALTER itself.
func (s *Stream) Switch(ctx context.Context, tx bun.Tx, on bool, lockTimeout string, alterErr func(error) error) error {
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'"); err != nil {
		return err
	}
	alter := disableSQL
	if on {
		alter = enableSQL
	}
	if _, err := tx.ExecContext(ctx, s.names.SQL(alter)); err != nil {
		return alterErr(err)
	}
	return nil
}

// InsertCursor writes the base cursor row and its position, at a snapshot taken now, unless the row
// exists: a cursor left by an earlier EnableStream is kept as it is.
func (s *Stream) InsertCursor(ctx context.Context, tx bun.Tx) error {
	_, err := tx.ExecContext(ctx, s.names.SQL(`WITH added AS (INSERT INTO bunbox_stream (name) VALUES ('outbox')
  ON CONFLICT (name) DO NOTHING RETURNING name)
INSERT INTO bunbox_stream_positions (part, name, seq, snap_from, system_id, max_id)
SELECT 0, a.name, `+nextSeq+`, pg_current_snapshot(), (SELECT system_identifier FROM pg_control_system()),
  (SELECT max(id) FROM outbox_events) FROM added a`))
	return err
}

// nextSeq numbers the first position of a cursor row a (new, or created anew), after any position a
// cursor of its name left.
const nextSeq = `coalesce((SELECT max(o.seq) FROM bunbox_stream_positions o WHERE o.name = a.name), 0) + 1`

// Enabled reports whether the stream is on for the outbox (streamsql.Enabled).
func (s *Stream) Enabled(ctx context.Context, db bun.IDB) (bool, error) {
	var on bool
	err := db.NewRaw(s.names.SQL(streamsql.Enabled)).Scan(ctx, &on)
	return on, err
}

// HandOverWaiting gives every row still waiting in the stream (by its lane's cursor) to the per-row path,
// in tx which holds the outbox table's lock (DisableStream): a waiting row cancelled meanwhile was never enqueued, and its cancel is
// settled with cancelResult as bunx settles a pending row's; streamed rows with no cursor row cannot have
// been delivered (EnableStream writes the row) and are handed over too.
func (s *Stream) HandOverWaiting(ctx context.Context, tx bun.Tx, cancelResult string) error {
	_, err := tx.ExecContext(ctx, s.names.SQL(`UPDATE outbox_events e `+handOverWaitingSet+`
WHERE e.published_at = `+streamsql.Sentinel+` AND `+streamsql.IsWaiting), cancelResult)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.names.SQL(`UPDATE outbox_events SET published_at = NULL
WHERE published_at = 'infinity' AND NOT EXISTS (SELECT 1 FROM bunbox_stream WHERE name = 'outbox')`))
	return err
}

// SnapshotXmax returns the xmax of a pg_snapshot in its text form, xmin:xmax:xip,...
func SnapshotXmax(snap string) string {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) < 2 {
		return "0"
	}
	return parts[1]
}

// SnapshotXip returns the xip list of a pg_snapshot in its text form (xmin:xmax:xip,...) as an array
// literal, {} for none ("" is no snapshot).
func SnapshotXip(snap string) string {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) < 3 {
		return "{}"
	}
	return "{" + parts[2] + "}"
}

// XidLess reports whether the xid8 a is below b, both in decimal text. A malformed one counts as 0.
func XidLess(a, b string) bool {
	x, _ := strconv.ParseUint(a, 10, 64)
	y, _ := strconv.ParseUint(b, 10, 64)
	return x < y
}
