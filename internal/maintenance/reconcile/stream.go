package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
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
// The incremental pass (see cursor) reads, among the streamed rows, only those the cursor may have
// delivered since the previous pass read the cursor rows (streamSince): a task lost since that pass's
// marker was written after it, so after that read; the stream round that enqueued it had not committed
// its cursor move past the row at that read, so the row was not visible in the snap_from then of the
// cursor row that judged it (its lane's, or the base's while the lane had none). That is the exact
// condition of the page's read. Its range in the stream's index, (xid, id), comes from the snapshots of
// streamsql.BoundingSnapshots read then: such a row is not visible in one of them, so its xid is in
// progress in one (a few xids, each read as a range of its own) or at or above the least of their xmax.
// Not their xmin: a transaction that stays open holds every snapshot's xmin back, and a bound at the
// xmin read every row delivered since it began at each pass, and looked each one up in Redis again.
//
// A sweep reads every delivered streamed row created within Window, through the same index from the xid
// of a mark taken before the window began (see xidMark): one of the Reconciler's own passes, or when it
// is younger than Window one that a pass recorded in the database (see reconcile_marks.go). Only without
// either does it look for the least xid of the streamed rows created within the window, a read of every
// streamed row the table keeps (PublishedRetention). The rows created before the window whose ProcessAt
// is within it or ahead are read from the index's start.

// streamSince is what a pass read of the stream's cursors, for the next incremental pass (see above).
type streamSince struct {
	valid bool // false: there was no cursor row, and every delivered streamed row is read
	// from is the least xmax of the bounding snapshots, and xips the xids below it in progress in one of
	// them, in order: a row delivered since has one of xips or an xid at or above from.
	from uint64
	xips []uint64
	// names and snaps are each cursor row's name and snap_from.
	names, snaps []string
}

// newStreamSince derives a streamSince from what a pass read.
func newStreamSince(c store.StreamCursors) (streamSince, error) {
	if len(c.Bounds) == 0 {
		return streamSince{}, nil
	}
	since := streamSince{valid: true, from: math.MaxUint64, names: c.Names, snaps: c.Snaps}
	var inProgress []uint64
	for _, b := range c.Bounds {
		snap, err := parseSnapshot(b)
		if err != nil {
			return streamSince{}, err
		}
		since.from = min(since.from, snap.xmax)
		inProgress = append(inProgress, snap.xip...)
	}
	for _, x := range inProgress {
		if x < since.from {
			since.xips = append(since.xips, x)
		}
	}
	slices.Sort(since.xips)
	since.xips = slices.Compact(since.xips)
	return since, nil
}

// snapshot is a pg_snapshot: xmin, xmax and the xids in progress between them.
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// parseSnapshot parses a pg_snapshot's text form, "xmin:xmax:xip,...".
func parseSnapshot(text string) (snapshot, error) {
	bad := func(err error) (snapshot, error) {
		return snapshot{}, fmt.Errorf("relay: reconciler: the stream's cursor %q is not a snapshot: %w", text, err)
	}
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return bad(errors.New("not xmin:xmax:xip"))
	}
	var s snapshot
	var err error
	if s.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return bad(err)
	}
	if s.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return bad(err)
	}
	if parts[2] != "" {
		for x := range strings.SplitSeq(parts[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return bad(err)
			}
			s.xip = append(s.xip, v)
		}
	}
	return s, nil
}

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
// in an incremental pass sinceFrom (streamSince.from; 0 in a sweep): the xids of streamSince.xips below
// it are read on their own (scanStream). Without any, it finds the least xid of the streamed rows created within the window
// (the read of every streamed row the table keeps that the marks are there to avoid), and returns false
// when there is none.
func (r *Reconciler) StreamStart(ctx context.Context, rg Range, sinceFrom uint64) (uint64, bool, error) {
	from, err := r.windowStart(ctx, rg)
	if err != nil {
		return 0, false, err
	}
	return r.streamStart(ctx, rg, from, sinceFrom)
}

// streamStart is StreamStart given the window's mark (windowStart).
func (r *Reconciler) streamStart(ctx context.Context, rg Range, from, sinceFrom uint64) (uint64, bool, error) {
	if sinceFrom > 0 {
		return max(from, sinceFrom), true, nil
	}
	if from > 0 {
		return from, true, nil
	}
	first, err := store.FirstStreamedXID(ctx, r.db, r.names, rg.From, rg.To)
	if err != nil {
		return 0, false, fmt.Errorf("relay: reconciler: read delivered streamed rows: %w", err)
	}
	if !first.Valid {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(first.String, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("relay: reconciler: the least xid of the window %q: %w", first.String, err)
	}
	return v, true, nil
}

// windowStart returns the xmax of the latest mark at or before the window's start (see xidMark), its own
// or a recorded one, or 0 without one.
func (r *Reconciler) windowStart(ctx context.Context, rg Range) (uint64, error) {
	c := &r.cursor
	from, err := strconv.ParseUint(c.sweepFromXID(rg.From), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("relay: reconciler: a time mark of the stream: %w", err)
	}
	if from > 0 {
		return from, nil
	}
	m, ok, err := r.recordedMark(ctx, rg.From)
	if err != nil {
		return 0, fmt.Errorf("relay: reconciler: read a time mark of the stream: %w", err)
	}
	if !ok {
		return 0, nil
	}
	c.adoptMark(m)
	if from, err = strconv.ParseUint(m.xmax, 10, 64); err != nil {
		return 0, fmt.Errorf("relay: reconciler: a time mark of the stream: %w", err)
	}
	return from, nil
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
// per-row path). since is what the previous pass read of the cursors (incremental), nil for a sweep: then
// the rows of since.xips below the start are read first, each xid's a range of its own, then the rows
// from the start on. Each page is read in a transaction of its own with the planner settings of
// StreamPageBounds.
func (r *Reconciler) scanStream(ctx context.Context, res *Result, rg Range, since *streamSince) error {
	if rg.Scheduled { // the rows created before the window are read from the index's start
		return r.scanStreamRange(ctx, res, rg, since, 0, store.MaxXID)
	}
	var sinceFrom uint64
	if since != nil && since.valid {
		sinceFrom = since.from
	}
	mark, err := r.windowStart(ctx, rg)
	if err != nil {
		return err
	}
	start, ok, err := r.streamStart(ctx, rg, mark, sinceFrom)
	if err != nil || !ok {
		return err
	}
	if sinceFrom > 0 {
		for _, x := range since.xips {
			if x < mark || x >= start {
				continue
			}
			if err := r.scanStreamRange(ctx, res, rg, since, x, strconv.FormatUint(x, 10)); err != nil {
				return err
			}
		}
	}
	return r.scanStreamRange(ctx, res, rg, since, start, store.MaxXID)
}

// scanStreamRange is scanStream's read of the rows with an xid from from to to (a decimal, or
// store.MaxXID).
func (r *Reconciler) scanStreamRange(ctx context.Context, res *Result, rg Range, since *streamSince, from uint64, to string) error {
	// (xid, id) > (x, 0): the xids from x on (ids are positive).
	p := rg.page(r.cfg.BatchSize)
	p.AfterXID, p.ToXID = strconv.FormatUint(from, 10), to
	if since != nil && since.valid {
		p.SinceNames, p.SinceSnaps = nonNil(since.names), nonNil(since.snaps)
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

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
