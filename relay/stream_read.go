package relay

import (
	"context"
	"database/sql"
	"math"
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
}

// lockCursorSQL locks the cursor row, unless another relay's stream round holds it.
const lockCursorSQL = `SELECT snap_from::text, snap_to::text, after_xid::text, after_id FROM bunbox_stream
WHERE name = 'outbox' FOR UPDATE SKIP LOCKED`

// lockCursor locks the cursor row in tx and reads it; ok is false when another relay holds it (or there is
// no cursor row).
func lockCursor(ctx context.Context, tx bun.Tx, q func(string) string) (c streamCursor, ok bool, err error) {
	err = tx.QueryRowContext(ctx, q(lockCursorSQL)).Scan(&c.from, &c.to, &c.afterXid, &c.afterID)
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
// (xid, id), in (xid, id) order, up to the limit. Arguments: from, to, the position's xid and id, the limit.
// The half written for xidCond is either the transactions that were running at from (their xids are below
// from's xmax) or those that began after it; a transaction still running at to is not in the pair, and
// its rows wait for the next one.
func streamReadPart(xidCond string) string {
	return `(SELECT ` + claimColumns + `, ` + rowSizeSQL + ` AS row_size, xid AS stream_xid,
  cancelled_at IS NOT NULL AS cancelled, cancelled_at IS NOT NULL AND cancel_settled_at IS NULL AS unsettled
FROM outbox_events
WHERE ` + xidCond + `
  AND published_at = ` + streamsql.Sentinel + `
  AND pg_visible_in_snapshot(xid, ?1::pg_snapshot) AND (xid, id) > (?2::xid8, ?3::bigint)
ORDER BY xid, id
LIMIT ?4)`
}

// streamReadSQL reads the next rows of the pair, PgQ's way: the rows of the transactions that committed
// between the two snapshots, that is those running at from (from's xip list) or begun after it (from's xmax
// on) and visible in to. A transaction that stays open does not hold the stream back, and the rows already
// delivered are not read again: each half walks outbox_events_stream_idx from where the pair's rows begin.
// Every xid of the first half is below every xid of the second (from's xmax), so the halves, each cut at
// the limit, come in order. A cancelled row is read too, so that the round settles its cancel as it
// passes it, but never enqueued.
var streamReadSQL = streamReadPart(`xid = ANY(ARRAY(SELECT pg_snapshot_xip(?0::pg_snapshot)))`) + `
UNION ALL
` + streamReadPart(`xid >= pg_snapshot_xmax(?0::pg_snapshot) AND xid < pg_snapshot_xmax(?1::pg_snapshot)`) + `
ORDER BY stream_xid, id
LIMIT ?4`

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
	rows, err := tx.QueryContext(ctx, r.names.SQL(streamReadSQL), c.from.String, c.to.String, afterXid, afterID, limit)
	if err != nil {
		return streamRead{}, err
	}
	defer rows.Close()
	var res streamRead
	var metadata sql.RawBytes
	var timeoutNs, retentionNs, size, taken int64
	n := 0
	for rows.Next() {
		n++
		var ev model.Event
		var xid string
		var cancelled, unsettled bool
		payload := (*[]byte)(&ev.Payload)
		err := rows.Scan(&ev.ID, &ev.EventID, &ev.Name, &ev.Queue, payload, &metadata, &ev.CreatedAt, &ev.Attempts,
			&ev.ProcessAt, &ev.MaxRetry, &timeoutNs, &ev.Deadline, &ev.Group, &retentionNs,
			&ev.OrderingKey, &ev.PayloadEncoded, &size, &xid, &cancelled, &unsettled)
		if err != nil {
			return streamRead{}, err
		}
		if len(res.events) > 0 && taken+size > budget {
			res.full = true // the rest of the pair comes in the next round
			break
		}
		taken += size
		ev.Timeout, ev.TaskRetention = time.Duration(timeoutNs), time.Duration(retentionNs)
		if err := readRow(&ev, metadata); err != nil {
			if res.bad == nil {
				res.bad = map[int]error{}
			}
			res.bad[len(res.events)] = err
		}
		if cancelled {
			if res.cancelled == nil {
				res.cancelled = map[int]bool{}
			}
			res.cancelled[len(res.events)] = unsettled
		}
		res.events = append(res.events, ev)
		res.xids = append(res.xids, xid)
	}
	if err := rows.Err(); err != nil {
		return streamRead{}, err
	}
	res.full = res.full || n >= limit
	return res, nil
}

// streamDueSQL reports whether streamed rows wait for the stream: rows of a transaction running at the
// cursor's from, or begun after it, that the cursor has not passed (cancelled ones too: the stream settles
// their cancels as it passes them). Like the read, it walks
// outbox_events_stream_idx from where the undelivered rows begin.
const streamDueSQL = `WITH c AS MATERIALIZED (SELECT * FROM bunbox_stream WHERE name = 'outbox')
SELECT EXISTS (SELECT 1 FROM outbox_events e, c AS s
  WHERE e.xid = ANY(ARRAY(SELECT pg_snapshot_xip(snap_from) FROM c))
    AND ` + streamsql.Waiting + `)
  OR EXISTS (SELECT 1 FROM outbox_events e, c AS s
  WHERE e.xid >= (SELECT pg_snapshot_xmax(snap_from) FROM c)
    AND ` + streamsql.Waiting + `)`

// streamDue reports whether a stream round may find rows to deliver; an error says yes, so that the round
// that follows meets it and backs off.
func (r *Relay) streamDue(ctx context.Context) bool {
	if !r.streaming(ctx) {
		return false
	}
	var due bool
	err := r.db.NewRaw(r.names.SQL(streamDueSQL)).Scan(ctx, &due)
	return err != nil || due
}
