package relay

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// streamCursor is the cursor row as a stream round holds it: the pair of snapshots being delivered (from,
// to) and the position reached in it (afterXid, afterID), all in PostgreSQL's text forms.
type streamCursor struct {
	from, to sql.NullString // to: NULL when no pair is open
	afterXid sql.NullString
	afterID  sql.NullInt64
	// The cluster the cursor was written on (system_id) and the one the round runs on (systemID), and the
	// xmax of the snapshot the lock statement ran in: see streamCluster.
	cursorSystem, system sql.NullInt64
	xmax                 string
}

// lockCursorSQL locks the cursor row, unless another relay's stream round holds it, and reads what tells
// whether the database runs on another cluster than the cursor's (stream_cluster.go).
const lockCursorSQL = `SELECT snap_from::text, snap_to::text, after_xid::text, after_id, system_id,
  (SELECT system_identifier FROM pg_control_system()), pg_snapshot_xmax(pg_current_snapshot())::text
FROM bunbox_stream WHERE name = 'outbox' FOR UPDATE SKIP LOCKED`

// lockCursor locks the cursor row in tx and reads it; ok is false when another relay holds it (or there is
// no cursor row).
func lockCursor(ctx context.Context, tx bun.Tx, q func(string) string) (c streamCursor, ok bool, err error) {
	err = tx.QueryRowContext(ctx, q(lockCursorSQL)).Scan(&c.from, &c.to, &c.afterXid, &c.afterID,
		&c.cursorSystem, &c.system, &c.xmax)
	if err == sql.ErrNoRows {
		return c, false, nil
	}
	return c, err == nil, err
}

// currentSnapshot reads pg_current_snapshot() in a statement of its own: run after the cursor row is
// locked, it is taken after the commit of the stream round that held the row before, so a pair it closes
// never ends before it begins.
func currentSnapshot(ctx context.Context, tx bun.Tx) (string, error) {
	var s string
	err := tx.QueryRowContext(ctx, "SELECT pg_current_snapshot()::text").Scan(&s)
	return s, err
}

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
	return `(SELECT ` + claimColumns + `, ` + rowSizeSQL + ` AS row_size, xid AS stream_xid,
  cancelled_at IS NOT NULL AS cancelled, cancelled_at IS NOT NULL AND cancel_settled_at IS NULL AS unsettled
FROM outbox_events
WHERE ` + xidCond + `
  AND published_at = ` + streamsql.Sentinel + `
  AND pg_visible_in_snapshot(xid, ?1::pg_snapshot)
  AND (xid > ?3::xid8 OR (xid = ?3::xid8 AND id > ?4::bigint))
ORDER BY xid, id
LIMIT ?5)`
}

// streamReadSQL reads the next rows of the pair, PgQ's way: the rows of the transactions that committed
// between the two snapshots, that is those running at from (from's xip list) or begun after it (from's xmax
// on) and visible in to. A transaction that stays open does not hold the stream back, and the rows already
// delivered are not read again: each half walks outbox_events_stream_idx from where the pair's rows begin,
// or from the position once the round has one. from's xip list comes as a constant array (?6, see
// snapshotXip): an array the statement computes (ARRAY(SELECT pg_snapshot_xip(…))) is unknown to the
// planner, which then scans the table for it. Every xid of the first half is below every xid of the
// second (from's xmax), so the halves, each cut at the limit, come in order. A cancelled row is read too,
// so that the round settles its cancel as it passes it, but never enqueued.
//
// This text is for a position before the second half (none, or in from's xip list): the second half
// starts at from's xmax. streamReadAfterSQL is for a position in the second half.
var streamReadSQL = streamReadPair(`xid >= pg_snapshot_xmax(?0::pg_snapshot)`)

// streamReadAfterSQL is streamReadSQL for a position in the second half: that half's scan starts at the
// position itself, a row comparison on the index's columns and the only lower bound there, so that it
// does not first walk the rows of the position's transaction it has passed (with a scalar bound at the
// position's xid it did: up to a batch of rows filtered out per read when transactions write many events).
var streamReadAfterSQL = streamReadPair(`(xid, id) > (?3::xid8, ?4::bigint)`)

func streamReadPair(secondFrom string) string {
	return streamReadPart(`xid = ANY(?6::xid8[]) AND xid >= ?2::xid8`) + `
UNION ALL
` + streamReadPart(secondFrom+` AND xid < pg_snapshot_xmax(?1::pg_snapshot)`) + `
ORDER BY stream_xid, id
LIMIT ?5`
}

// streamRead is what one read of the stream returned.
type streamRead struct {
	events []model.Event
	bad    map[int]error // rows that cannot become tasks, by index into events
	xids   []string      // each event's xid
	// cancelled holds the rows whose cancel had committed when they were read, by index into events:
	// true for those whose cancel is not settled yet.
	cancelled map[int]bool
	full      bool // more rows of the pair may follow: the read was cut at the limit or the byte budget
}

// readStream reads up to limit rows of c's pair after c's position, no more than budget bytes of payload
// and metadata unless the first row alone is larger.
func (r *Relay) readStream(ctx context.Context, tx bun.Tx, c streamCursor, limit int, budget int64) (streamRead, error) {
	afterXid, afterID := "0", int64(math.MinInt64+1) // before every row (MinInt64 itself would not parse as -9223372036854775808::bigint)
	if c.afterXid.Valid && c.afterID.Valid {
		afterXid, afterID = c.afterXid.String, c.afterID.Int64
	}
	query := streamReadSQL
	if c.afterXid.Valid && !xidLess(c.afterXid.String, snapshotXmax(c.from.String)) {
		query = streamReadAfterSQL
	}
	rows, err := tx.QueryContext(ctx, r.names.SQL(query), c.from.String, c.to.String, afterXid, afterXid, afterID,
		limit, snapshotXip(c.from.String))
	if err != nil {
		return streamRead{}, err
	}
	defer rows.Close()
	// Each row is scanned into its place in res.events (room for limit, the statement's LIMIT, each slot
	// zero: see spareEvents), and the scan's other destinations are declared once: a destination made per
	// row would be an allocation per row, as rows.Scan takes its address.
	res := streamRead{events: r.stream.spare.take(limit), xids: make([]string, 0, limit)}
	var (
		metadata                            sql.RawBytes
		timeoutNs, retentionNs, size, taken int64
		xid                                 string
		cancelled, unsettled                bool
	)
	n := 0
	for rows.Next() {
		n++
		i := len(res.events)
		if i < cap(res.events) {
			res.events = res.events[:i+1] // the slot is zero already
		} else {
			res.events = append(res.events, model.Event{})
		}
		ev := &res.events[i]
		payload := (*[]byte)(&ev.Payload)
		err := rows.Scan(&ev.ID, &ev.EventID, &ev.Name, &ev.Queue, payload, &metadata, &ev.CreatedAt, &ev.Attempts,
			&ev.ProcessAt, &ev.MaxRetry, &timeoutNs, &ev.Deadline, &ev.Group, &retentionNs,
			&ev.OrderingKey, &ev.PayloadEncoded, &size, &xid, &cancelled, &unsettled)
		if err != nil {
			return streamRead{}, err
		}
		if i > 0 && taken+size > budget {
			res.events[i] = model.Event{} // not kept: let its payload go, and leave the slot zero
			res.events = res.events[:i]
			res.full = true // the rest of the pair comes in the next round
			break
		}
		taken += size
		ev.Timeout, ev.TaskRetention = time.Duration(timeoutNs), time.Duration(retentionNs)
		if err := readRow(ev, metadata); err != nil {
			if res.bad == nil {
				res.bad = map[int]error{}
			}
			res.bad[i] = err
		}
		if cancelled {
			if res.cancelled == nil {
				res.cancelled = map[int]bool{}
			}
			res.cancelled[i] = unsettled
		}
		res.xids = append(res.xids, xid)
	}
	if err := rows.Err(); err != nil {
		return streamRead{}, err
	}
	res.full = res.full || n >= limit
	return res, nil
}

// streamDueSQL reports whether streamed rows wait for the stream. Its arguments come from the cursor row
// (streamDue reads it first), as constants, so that each part is a range of outbox_events_stream_idx that
// starts where the undelivered rows can begin, never at the delivered rows the retention keeps nor at those
// of the open pair the cursor has passed:
//   - ?0: snap_from's xip list: rows of a transaction running at snap_from, not passed in the open pair;
//   - ?1, ?2: snap_to's xip list and snap_from's xmax: rows of a transaction running at snap_to that began
//     after snap_from (not in the open pair at all; empty with no pair open);
//   - ?3: the greater of snap_from's xmax and the position's xid: rows not passed in the open pair, or
//     with no pair open every row of a transaction begun after snap_from.
//
// ?4, ?5, ?6 are snap_to and the position (NULL with no pair open): a row is passed when it is visible in
// snap_to and at or before the position. Cancelled rows count too: the stream settles their cancels as it
// passes them.
//
// ?7 is where the third part starts in ?3's transaction: after the position when ?3 is the position's xid
// (every row of that transaction up to the position is passed), before every row otherwise. The bound is a
// row comparison on the index's columns, so that the scan starts at the position and does not walk the rows
// of a large transaction the pair has passed.
//
// Each part is a scalar subquery that asks for its first row in the index's order (ORDER BY xid, id LIMIT
// 1), so that the planner walks the index whatever the statistics say: an EXISTS loses its ORDER BY and
// LIMIT to the planner, and after an ANALYZE that counted many rows past ?3 it was planned as a sequential
// scan that walks every row kept before the first one due (in the drain bench, 9 ms a check).
const streamDueSQL = `SELECT (SELECT 1 FROM outbox_events e
  WHERE e.xid = ANY(?0::xid8[]) AND e.published_at = 'infinity' AND NOT ` + streamPassedInPair + `
  ORDER BY e.xid, e.id LIMIT 1) IS NOT NULL
  OR (SELECT 1 FROM outbox_events e
  WHERE e.xid = ANY(?1::xid8[]) AND e.xid >= ?2::xid8 AND e.published_at = 'infinity'
  ORDER BY e.xid, e.id LIMIT 1) IS NOT NULL
  OR (SELECT 1 FROM outbox_events e
  WHERE (e.xid, e.id) > (?3::xid8, ?7::bigint) AND e.published_at = 'infinity' AND NOT ` + streamPassedInPair + `
  ORDER BY e.xid, e.id LIMIT 1) IS NOT NULL`

// streamPassedInPair is true for a row of outbox_events aliased e that the open pair has passed (see
// streamDueSQL's ?4-?6), false with no pair open.
const streamPassedInPair = `coalesce(pg_visible_in_snapshot(e.xid, ?4::pg_snapshot)
  AND (e.xid, e.id) <= (?5::xid8, ?6::bigint), false)`

// readCursorSQL reads the cursor row without locking it.
const readCursorSQL = `SELECT snap_from::text, snap_to::text, after_xid::text, after_id FROM bunbox_stream
WHERE name = 'outbox'`

// streamDue reports whether a stream round may find rows to deliver; an error says yes, so that the round
// that follows meets it and backs off.
func (r *Relay) streamDue(ctx context.Context) bool {
	if !r.streaming(ctx) || r.stream.active.Load() {
		return false // off, or another worker of this relay is in a stream round (streamState.active)
	}
	var c streamCursor
	err := r.db.QueryRowContext(ctx, r.names.SQL(readCursorSQL)).Scan(&c.from, &c.to, &c.afterXid, &c.afterID)
	if errors.Is(err, sql.ErrNoRows) {
		return false // no cursor row: no row was ever streamed
	}
	if err != nil {
		return true
	}
	fromXmax := snapshotXmax(c.from.String)
	from := fromXmax
	if c.afterXid.Valid && xidLess(fromXmax, c.afterXid.String) {
		from = c.afterXid.String
	}
	var to, afterXid any // NULL with no pair open
	var afterID any
	startID := int64(math.MinInt64 + 1) // before every row of from's transaction
	if c.to.Valid {
		to = c.to.String
		if c.afterXid.Valid && c.afterID.Valid {
			afterXid, afterID = c.afterXid.String, c.afterID.Int64
			if from == c.afterXid.String {
				startID = c.afterID.Int64
			}
		}
	}
	var due bool
	err = r.db.QueryRowContext(ctx, r.names.SQL(streamDueSQL), snapshotXip(c.from.String), snapshotXip(c.to.String),
		fromXmax, from, to, afterXid, afterID, startID).Scan(&due)
	return err != nil || due
}

// snapshotXmax returns the xmax of a pg_snapshot in its text form, xmin:xmax:xip,...
func snapshotXmax(snap string) string {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) < 2 {
		return "0"
	}
	return parts[1]
}

// snapshotXip returns the xip list of a pg_snapshot in its text form (xmin:xmax:xip,...) as an array
// literal, {} for none ("" is no snapshot).
func snapshotXip(snap string) string {
	parts := strings.SplitN(snap, ":", 3)
	if len(parts) < 3 {
		return "{}"
	}
	return "{" + parts[2] + "}"
}

// xidLess reports whether the xid8 a is below b, both in decimal text. A malformed one counts as 0.
func xidLess(a, b string) bool {
	x, _ := strconv.ParseUint(a, 10, 64)
	y, _ := strconv.ParseUint(b, 10, 64)
	return x < y
}
