package relay

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
)

// The reconciler and the stream (EnableStream). A streamed row the cursor has delivered has no publish
// time (published_at stays 'infinity'), so the reconciler places it in its window by its created_at: its
// task was enqueued after that, so a row created within Window has a task younger than Window, which
// TaskRetention still keeps once it completed. The cursor's moved_at would not do: it is one time for
// every delivered row (the last move), so every row of the stream would seem published a moment ago.
// A streamed row that waited in the stream longer than Window before its delivery is not checked (as a
// row published by a transaction open longer than Window is not).
//
// Waiting streamed rows are never read: their tasks do not exist yet, and the stream delivers them.
//
// The incremental pass (see reconcileCursor) reads, among the streamed rows, only those the cursor may
// have delivered since the previous pass read it: a task lost since that pass's marker was written after
// it, so after that read; the stream round that enqueued it had not committed its cursor move past the
// row at that read, so the row was not visible in the snap_from read then, and its xid is at or above
// that snapshot's xmin (streamsql.DeliveredSince). That is a range of the stream's index, (xid, id), and
// the rows' pages are ordered by it. A sweep reads every delivered streamed row created within Window,
// through the same index from the xid of a mark taken before the window began (see xidMark): one of the
// Reconciler's own passes, or when it is younger than Window one that a pass recorded in the database
// (see reconcile_marks.go). Only without either does it look for the least xid of the streamed rows
// created within the window, a read of every streamed row the table keeps (PublishedRetention). The rows
// created before the window whose ProcessAt is within it or ahead are read from the index's start.

// reconcileStreamFromSQL reads the cursor's last finished snapshot as text (NULL without a cursor row), and
// an xidMark: the xmax of the statement's snapshot (taken as the statement began), then the clock.
const reconcileStreamFromSQL = `SELECT (SELECT snap_from::text FROM bunbox_stream WHERE name = 'outbox'),
  pg_snapshot_xmax(pg_current_snapshot())::text, clock_timestamp()`

// xidMark pairs a time with the transaction id PostgreSQL was about to assign at or before it: every
// transaction that starts after at has an xid of at least xmax (ids are assigned in order, at a
// transaction's first write, after its start). A sweep starts its read of the stream's index at the xmax
// of the latest mark at or before the start of the window: a row created within the window was written
// by a transaction that started after that mark. Without one (a Reconciler younger than its Window) it
// reads from the index's start.
type xidMark struct {
	xmax string
	at   time.Time
}

// markXID records m and forgets the marks no sweep needs: all but the latest at or before from.
func (c *reconcileCursor) markXID(m xidMark, from time.Time) {
	c.xidMarks = append(c.xidMarks, m)
	keep := 0
	for i, old := range c.xidMarks {
		if !old.at.After(from) {
			keep = i
		}
	}
	c.xidMarks = c.xidMarks[keep:]
}

// adoptMark keeps m, a mark recorded in the database before the first of the cursor's own, as the earliest.
func (c *reconcileCursor) adoptMark(m xidMark) {
	if len(c.xidMarks) == 0 || m.at.Before(c.xidMarks[0].at) {
		c.xidMarks = append([]xidMark{m}, c.xidMarks...)
	}
}

// sweepFromXID returns the xid a sweep of the window starting at from reads the stream's index from: the
// xmax of the latest mark at or before from, or "0".
func (c *reconcileCursor) sweepFromXID(from time.Time) string {
	xid := "0"
	for _, m := range c.xidMarks {
		if !m.at.After(from) {
			xid = m.xmax
		}
	}
	return xid
}

// reconcileStreamFirstSQL reads the least xid of the streamed rows created within [?0, ?1] (NULL: none).
const reconcileStreamFirstSQL = `SELECT min(e.xid)::text FROM outbox_events e
WHERE e.published_at = 'infinity' AND e.created_at >= ?0 AND e.created_at <= ?1`

// reconcileStreamPageSQL reads a page of the delivered streamed rows created within [?0, ?1], and with
// scheduled those created before ?0 whose process_at is at or after it, keyset-paginated on (xid, id)
// after (?2, ?3), of the queues ?4 (all when empty) but ?5, ?6 at most, delivered since the cursor had
// the snap_from ?7 (NULL: any). Grouped and cancelled events are left out, as in reconcilePageSQL.
func reconcileStreamPageSQL(scheduled bool) string {
	window := `e.created_at >= ?0 AND e.created_at <= ?1`
	if scheduled {
		window = `e.process_at >= ?0 AND e.created_at < ?0`
	}
	return `SELECT e.id, e.event_id, e.event_name, e.queue, e.created_at AS published_at, e.process_at,
  e.created_at AS page_key, true AS streamed, e.xid::text AS page_xid
FROM outbox_events e ` + streamsql.Cursor + `
WHERE e.published_at = 'infinity' AND (e.xid, e.id) > (?2::xid8, ?3::bigint) AND ` + streamsql.DeliveredSince("?7") + `
  AND ` + streamsql.Delivered + ` AND ` + window + ` AND e.task_group IS NULL AND e.cancelled_at IS NULL
  AND (cardinality(?4::text[]) = 0 OR e.queue = ANY(?4::text[])) AND NOT (e.queue = ANY(?5::text[]))
ORDER BY e.xid, e.id
LIMIT ?6`
}

// streamStart returns the xid from which a scan of rg (not scheduled) reads the stream's index: the
// greatest of the lower bounds it knows of the xids of the rows it looks for. Those are the mark of this
// Reconciler's own taken before the window began, else the latest recorded one (see recordedMark), and
// in an incremental pass (since valid) the xmin of the cursor read by the previous pass. Without any, it
// finds the least xid of the streamed rows created within the window (the read of every streamed row
// the table keeps that the marks are there to avoid), and returns false when there is none.
func (r *Reconciler) streamStart(ctx context.Context, rg scanRange, since *sql.NullString) (string, bool, error) {
	c := &r.cursor
	from, err := strconv.ParseUint(c.sweepFromXID(rg.from), 10, 64)
	if err != nil {
		return "", false, fmt.Errorf("relay: reconciler: a time mark of the stream: %w", err)
	}
	if from == 0 {
		m, ok, err := r.recordedMark(ctx, rg.from)
		if err != nil {
			return "", false, fmt.Errorf("relay: reconciler: read a time mark of the stream: %w", err)
		}
		if ok {
			c.adoptMark(m)
			if from, err = strconv.ParseUint(m.xmax, 10, 64); err != nil {
				return "", false, fmt.Errorf("relay: reconciler: a time mark of the stream: %w", err)
			}
		}
	}
	if since != nil && since.Valid {
		xmin, err := snapshotXmin(since.String)
		if err != nil {
			return "", false, err
		}
		return strconv.FormatUint(max(from, xmin), 10), true, nil
	}
	if from > 0 {
		return strconv.FormatUint(from, 10), true, nil
	}
	var first sql.NullString
	if err := r.db.NewRaw(r.names.SQL(reconcileStreamFirstSQL), rg.from, rg.to).Scan(ctx, &first); err != nil {
		return "", false, fmt.Errorf("relay: reconciler: read delivered streamed rows: %w", err)
	}
	return first.String, first.Valid, nil
}

// indexOrderSettings are the planner settings, as rows of (name, setting) for set_config, under which a
// statement that asks for the next rows in an index's order (ORDER BY the index's columns LIMIT n) reads
// them from that index whatever the statistics say, and is not compiled: no bitmap scan, no sort, no JIT.
// After an ANALYZE that sampled few of the newest rows of a large table the planner took them for a few
// and chose a bitmap scan and a sort of all of them, at each read; and with 10 M rows kept its estimates
// passed jit_above_cost, so each read of a reconciler's page was compiled first: 18 ms a page on average
// against 2.3 on an empty table (pg_stat_statements, the keptdrain bench), for a few buffers each.
const indexOrderSettings = "('jit', 'off'), ('enable_bitmapscan', 'off'), ('enable_sort', 'off')"

// reconcileStreamBounds are the settings of a page's read of the streamed rows within the window, in the
// index's order, local to its transaction (safe behind a transaction pooler; any role may set them); the
// scheduled rows' read (from the index on process_at, then sorted: few rows) only turns JIT off.
var (
	reconcileStreamBounds          = sessionBounds{sql: setLocalSQL(indexOrderSettings)}
	reconcileStreamScheduledBounds = sessionBounds{sql: "SELECT set_config('jit', 'off', true)"}
)

// readStreamPage runs a page's read (reconcileStreamPageSQL) in a transaction of its own with the bounds b.
func (r *Reconciler) readStreamPage(ctx context.Context, b sessionBounds, query string, args ...any) ([]reconcileRow, error) {
	tx, err := beginBounded(ctx, r.db, b)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	var rows []reconcileRow
	if err := tx.NewRaw(query, args...).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	return rows, tx.Commit()
}

// scanStream pages through the delivered streamed rows of rg in (xid, id) order, looks their tasks up and
// requeues the rows whose task is gone (a requeued streamed row leaves the stream: a pending row of the
// per-row path). since is the cursor's snap_from read by the previous pass (incremental), nil for a sweep.
func (r *Reconciler) scanStream(ctx context.Context, res *ReconcileResult, rg scanRange, since *sql.NullString) error {
	// (xid, id) > (x, 0): the xids from x on (ids are positive). The rows created before the window (with
	// scheduled) are read from the index's start.
	afterXID, afterID := "0", int64(0)
	if !rg.scheduled {
		var ok bool
		var err error
		if afterXID, ok, err = r.streamStart(ctx, rg, since); err != nil || !ok {
			return err
		}
	}
	queues, notQueues := pgdialect.Array(nonNil(rg.queues)), pgdialect.Array(nonNil(rg.notQueues))
	var bound sql.NullString
	if since != nil {
		bound = *since
	}
	query := r.names.SQL(reconcileStreamPageSQL(rg.scheduled))
	bounds := reconcileStreamBounds
	if rg.scheduled {
		bounds = reconcileStreamScheduledBounds
	}
	for {
		rows, err := r.readStreamPage(ctx, bounds, query, rg.from, rg.to, afterXID, afterID, queues, notQueues,
			r.cfg.BatchSize, bound)
		if err != nil {
			return fmt.Errorf("relay: reconciler: read delivered streamed rows: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		last := &rows[len(rows)-1]
		afterXID, afterID = last.PageXID, last.ID
		if err := r.checkPage(ctx, res, rows); err != nil {
			return err
		}
		if len(rows) < r.cfg.BatchSize {
			return nil
		}
	}
}
