package reconcile

import (
	"context"
	"log/slog"
	"time"

	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/internal/store"
)

// Time marks kept in the database (bunbox_stream_marks, migration 20261206000001). A Reconciler keeps the
// xidMarks of its own passes in memory, so for its first Window it has none taken before its window began,
// and its sweeps would have to find where the window's streamed rows begin among every streamed row the
// table keeps (PublishedRetention: millions), an index scan of all of them at each sweep. So each pass
// records its mark in the table too (at most one every markEvery across the reconcilers of the outbox),
// and a sweep with no mark of its own before the window reads the latest recorded one before it.
//
// A recorded mark is a fact about the database's transaction ids, true from then on, whoever wrote it:
// it is read with a margin (MarkMargin) for the clocks of two servers (a failover) that disagree a
// little. Without the table (its migration not applied) or the privilege to write it, the reconciler
// says so once at Warn and sweeps as before: slower, not less.

// markEvery is the least time between two recorded marks; MarkMargin is how much earlier than the
// window's start a recorded mark must be to be used.
const (
	markEvery  = 30 * time.Second
	MarkMargin = time.Second
)

// recordMark writes m to bunbox_stream_marks and deletes the marks older than TaskRetention (every
// Window is shorter). A missing table or privilege is said once and is no error of the pass.
func (r *Reconciler) recordMark(ctx context.Context, m xidMark) error {
	err := store.RecordMark(ctx, r.db, r.names, m.at, m.xmax, m.at.Add(-r.cfg.TaskRetention), markEvery)
	if err == nil || !r.marksUnusable(ctx, err) {
		return err
	}
	return nil
}

// recordedMark returns the latest mark recorded more than MarkMargin before from, and false without one.
func (r *Reconciler) recordedMark(ctx context.Context, from time.Time) (xidMark, bool, error) {
	var m xidMark
	var ok bool
	var err error
	m.xmax, m.at, ok, err = store.RecordedMark(ctx, r.db, r.names, from.Add(-MarkMargin))
	switch {
	case err == nil && !ok:
		return m, false, nil
	case err != nil && r.marksUnusable(ctx, err):
		return m, false, nil
	case err != nil:
		return m, false, err
	}
	return m, true, nil
}

// marksUnusable reports whether err says that bunbox_stream_marks is missing or that the role may not use
// it, and says so once.
func (r *Reconciler) marksUnusable(ctx context.Context, err error) bool {
	if !pgerr.Is(err, pgerr.UndefinedTable) && !pgerr.Is(err, pgerr.InsufficientPrivilege) {
		return false
	}
	if !r.cursor.marksLogged {
		r.cursor.marksLogged = true
		r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler: cannot keep the stream's time marks in "+
			r.names.Qualify("bunbox_stream_marks")+" (apply bunbox's migrations, and GRANT SELECT, INSERT, DELETE on it "+
			"to the reconciler's role): until it has run for its Window, each sweep looks for the window's first "+
			"streamed row among every streamed row the table keeps", slog.Any("err", err))
	}
	return true
}
