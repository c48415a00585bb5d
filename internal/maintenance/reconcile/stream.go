package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
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
// The incremental pass (see cursor) reads, among the streamed rows, only those the cursor may
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
func (c *cursor) markXID(m xidMark, from time.Time) {
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
func (c *cursor) adoptMark(m xidMark) {
	if len(c.xidMarks) == 0 || m.at.Before(c.xidMarks[0].at) {
		c.xidMarks = append([]xidMark{m}, c.xidMarks...)
	}
}

// sweepFromXID returns the xid a sweep of the window starting at from reads the stream's index from: the
// xmax of the latest mark at or before from, or "0".
func (c *cursor) sweepFromXID(from time.Time) string {
	xid := "0"
	for _, m := range c.xidMarks {
		if !m.at.After(from) {
			xid = m.xmax
		}
	}
	return xid
}

// StreamStart returns the xid from which a scan of rg (not scheduled) reads the stream's index: the
// greatest of the lower bounds it knows of the xids of the rows it looks for. Those are the mark of this
// Reconciler's own taken before the window began, else the latest recorded one (see recordedMark), and
// in an incremental pass (since valid) the xmin of the cursor read by the previous pass. Without any, it
// finds the least xid of the streamed rows created within the window (the read of every streamed row
// the table keeps that the marks are there to avoid), and returns false when there is none.
func (r *Reconciler) StreamStart(ctx context.Context, rg Range, since *sql.NullString) (string, bool, error) {
	c := &r.cursor
	from, err := strconv.ParseUint(c.sweepFromXID(rg.From), 10, 64)
	if err != nil {
		return "", false, fmt.Errorf("relay: reconciler: a time mark of the stream: %w", err)
	}
	if from == 0 {
		m, ok, err := r.recordedMark(ctx, rg.From)
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
	first, err := store.FirstStreamedXID(ctx, r.db, r.names, rg.From, rg.To)
	if err != nil {
		return "", false, fmt.Errorf("relay: reconciler: read delivered streamed rows: %w", err)
	}
	return first.String, first.Valid, nil
}

// StreamPageBounds are the settings of a page's read of the streamed rows within the window, in the
// index's order, local to its transaction (safe behind a transaction pooler; any role may set them), a
// statement for store.Begin; the scheduled rows' read (from the index on process_at, then sorted: few
// rows) only turns JIT off (streamScheduledPageBounds).
const (
	StreamPageBounds          = "SELECT set_config(name, setting, true) FROM (VALUES " + streamsql.IndexOrderSettings + ") AS s(name, setting)"
	streamScheduledPageBounds = "SELECT set_config('jit', 'off', true)"
)

// scanStream pages through the delivered streamed rows of rg in (xid, id) order, looks their tasks up and
// requeues the rows whose task is gone (a requeued streamed row leaves the stream: a pending row of the
// per-row path). since is the cursor's snap_from read by the previous pass (incremental), nil for a sweep.
// Each page is read in a transaction of its own with the planner settings of StreamPageBounds.
func (r *Reconciler) scanStream(ctx context.Context, res *Result, rg Range, since *sql.NullString) error {
	// (xid, id) > (x, 0): the xids from x on (ids are positive). The rows created before the window (with
	// scheduled) are read from the index's start.
	p := rg.page(r.cfg.BatchSize)
	p.AfterXID = "0"
	if !rg.Scheduled {
		var ok bool
		var err error
		if p.AfterXID, ok, err = r.StreamStart(ctx, rg, since); err != nil || !ok {
			return err
		}
	}
	if since != nil {
		p.Since = *since
	}
	bounds := StreamPageBounds
	if rg.Scheduled {
		bounds = streamScheduledPageBounds
	}
	for {
		var rows []store.ReconcileRow
		err := store.InTx(ctx, r.db, bounds, func(tx bun.Tx) error {
			var err error
			rows, err = store.ReadStreamedPage(ctx, tx, r.names, p)
			return err
		})
		if err != nil {
			return fmt.Errorf("relay: reconciler: read delivered streamed rows: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		last := &rows[len(rows)-1]
		p.AfterXID, p.AfterID = last.PageXID, last.ID
		if err := r.checkPage(ctx, res, rows); err != nil {
			return err
		}
		if len(rows) < r.cfg.BatchSize {
			return nil
		}
	}
}

// snapshotXmin returns the xmin of a pg_snapshot in its text form ("xmin:xmax:xip,..."), as a decimal.
func snapshotXmin(snap string) (uint64, error) {
	xmin, _, _ := strings.Cut(snap, ":")
	v, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("relay: reconciler: the stream's cursor %q is not a snapshot: %w", snap, err)
	}
	return v, nil
}
