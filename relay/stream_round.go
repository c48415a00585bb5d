package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// errHandOver marks a row the stream does not enqueue but hands to the per-row path: a row with an
// ordering key, which the keyed per-row path delivers in its key's order.
var errHandOver = errors.New("relay: handed to the per-row path")

// streamRound delivers the next batches of the stream (see stream.go), in one transaction with the bounds
// of every round (session.go):
//
//  1. lock the cursor row of the first lane with rows due, in the relay's order, that no other round
//     holds (SKIP LOCKED; stream_lanes.go); the round reads and moves that lane only;
//  2. open a pair of snapshots if none is open (to := pg_current_snapshot()), unless nothing committed
//     since from;
//  3. read the pair's next rows after the cursor's position, in (xid, id) order, within BatchSize and
//     BatchBytes (store.StreamReadSQL);
//  4. enqueue them as a per-row round does (deliver: the same tasks, options, spans and Observer calls),
//     with no mark per row, while reading the pair's next batch, up to streamRoundBatches batches
//     (readAhead, stream_ahead.go);
//  5. classify each row's outcome (tallyBatch, outcome.go) and hand to the per-row path (published_at
//     NULL) the keyed rows and the rows whose enqueue failed, the latter charged an attempt as a per-row
//     round charges them (chargeRow) when the failure is the task's own, and not charged when it is an
//     outage; settle the cancels of the rows it read cancelled, which it never enqueues
//     (cancelNeverPublished);
//  6. move the cursor past the rows read (a pair read to its end is finished: from := to) and commit.
//
// A round that dies before its commit (a crash, a partition ended by the session bounds, a terminated
// backend) releases the cursor row with its lock: the next stream round reads the same rows again and
// their TaskIDs absorb the second enqueue, as for a per-row round that dies after its enqueues. A relay
// that is stopped in the middle of a round moves the cursor past the last row it tried and no further,
// and hands the rows it did not try before that one to the per-row path, so that a stop enqueues nothing
// twice; a batch whose enqueues all met an outage ends the round before it, its rows still in the stream.
// The round is one BatchEvent (Observer.OnBatch) for all its batches.
//
// lanes, when not nil, are the lanes to try, in order, in a round of one small batch: the round of quiet
// queues (stream_quiet.go); nil tries the lanes with rows due in the relay's order (dueLanes).
func (rs *rounds) streamRound(ctx context.Context, lanes []string) (res BatchEvent) {
	start := rs.cfg.now()
	defer func() {
		res.Duration = rs.cfg.now().Sub(start)
		rs.record(ctx, res)
	}()
	if ctx.Err() != nil {
		return res
	}
	sr := rs.stream
	bg := context.WithoutCancel(ctx) // the cursor of what was enqueued has to be written
	small := lanes != nil
	if !small {
		var err error
		if lanes, err = sr.dueLanes(ctx); err != nil {
			if ctx.Err() == nil {
				res.Err = fmt.Errorf("stream: look for lanes due: %w", err)
			}
			return res
		}
	}
	if len(lanes) == 0 {
		return res // no lane has rows due
	}
	bounds := sr.bounds()
	tx, err := beginBounded(bg, rs.db, bounds)
	if err != nil {
		res.Err = fmt.Errorf("stream: begin: %w", err)
		return res
	}
	defer func() { _ = tx.Rollback() }()
	failed := func(what string, err error) BatchEvent { // before the enqueues: a stop is no failure
		if ctx.Err() == nil {
			res.Err = errors.Join(res.Err, fmt.Errorf("stream: %s: %w", what, err))
		}
		return res
	}
	writeFailed := func(what string, err error) BatchEvent { // after them: nothing of the round is kept
		res.Err = errors.Join(res.Err, fmt.Errorf("stream: %s: %w", what, err))
		return res
	}

	cur, ok, err := sr.st.LockLane(ctx, tx, lanes)
	if err != nil {
		return failed("lock a lane", err)
	}
	if !ok {
		res.streamBusy = true // other rounds hold every lane due
		return res
	}
	if moved, err := sr.cluster(bg, tx, cur); err != nil || moved {
		if err != nil {
			return failed("check the cursor's cluster", err)
		}
		return res // the cursors started anew: the next round reads from them
	}
	release := sr.testLocked(cur.Name) // before the deferred rollback, and before the commit
	defer release()
	opened := false
	if !cur.To.Valid {
		to, err := sr.st.CurrentSnapshot(ctx, tx)
		if err != nil {
			return failed("snapshot", err)
		}
		if to == cur.From.String {
			return res // nothing committed since from
		}
		cur.To, opened = sql.NullString{String: to, Valid: true}, true
	}
	defer func() { sr.state.quiet.note(cur.Queue, res.full) }()
	read, err := sr.readBatch(ctx, tx, cur, small)
	if err != nil {
		return failed("read", err)
	}
	sr.state.quiet.note(cur.Queue, read.full) // a backlog is known from the first read, not the round's end
	if len(read.events) == 0 {
		sr.state.spare.keep(read.events)
		if opened {
			return res // the new pair holds nothing yet: nothing to write
		}
		release()
		if err := rs.commitStream(bg, tx, cur, "", 0, true, 0); err != nil { // the open pair's rest was empty
			return failed("move the cursor", err)
		}
		return res
	}
	p := sr.readAhead(ctx, tx, bounds, cur, read, small)
	defer p.recycle(&sr.state.spare) // after the reports: nothing of the pass is used past the round
	res.Claimed = p.rows()
	res.full = p.full
	if p.readErr != nil {
		return writeFailed("read", p.readErr)
	}

	// A stop leaves the rows after the last one tried untouched, and an outage of a whole batch that
	// batch's rows and the later ones: the cursor stops before them.
	cut, outage := p.settled()
	res.Released = res.Claimed - cut
	var left error
	if outage != nil {
		left = fmt.Errorf("enqueue: %d rows left in the stream, none charged: %w", res.Claimed-cut, outage)
	}
	if cut == 0 {
		res.Err = left
		return res // Redis took nothing: the rows stay in the stream for the round after the backoff
	}
	var s streamSettled
	for _, b := range p.batches {
		n := min(len(b.read.events), cut-s.rows)
		if n <= 0 {
			break
		}
		s.add(rs.cfg, b, n, &res) // an outage sets res.Err: the relay backs off
	}
	res.Err = errors.Join(res.Err, left)
	sr.state.handedOver.Store(len(s.handOver) > 0)
	if err := rs.marks.HandedOver(bg, tx, s.handOver); err != nil {
		return writeFailed("hand over", err)
	}
	if err := rs.marks.Charged(bg, tx, s.charges); err != nil {
		return writeFailed("mark failed", err)
	}
	if err := rs.marks.CancelsSettled(bg, tx, cancelNeverPublished, s.cancels); err != nil {
		return writeFailed("settle cancels", err)
	}
	done := cut == res.Claimed && !p.full
	release()
	if err := rs.commitStream(bg, tx, cur, s.lastXid, s.lastID, done, s.maxID); err != nil {
		return writeFailed("move the cursor", err)
	}
	res.Published = s.delivered
	for _, part := range s.parts {
		rs.report(bg, part.events, part.charges, &res)
		for i := range part.events {
			if part.cancelled[i] {
				ev := &part.events[i]
				rs.log.LogAttrs(bg, slog.LevelInfo, "bunbox relay: cancelled event: "+cancelNeverPublished,
					slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
					slog.String("task_type", ev.Name), slog.String("queue", ev.Queue), slog.Int("tasks_removed", 0))
			}
		}
	}
	return res
}

// commitStream moves the cursor of tx's round (store.Stream.MoveCursor) and commits.
func (rs *rounds) commitStream(ctx context.Context, tx bun.Tx, cur streamCursor, xid string, id int64, done bool, maxID int64) error {
	if err := rs.stream.st.MoveCursor(ctx, tx, cur, xid, id, done, maxID); err != nil {
		return err
	}
	return tx.Commit()
}

// streamSettled is what a stream round writes and reports for the rows it settles, gathered batch by
// batch.
type streamSettled struct {
	rows              int     // rows settled so far
	handOver, cancels []int64 // ids of the rows to hand over, and of the cancelled rows whose cancel to settle
	charges           []store.Charge
	delivered         int
	lastXid           string // the last row settled, where the cursor moves to
	lastID            int64
	maxID             int64         // the largest id settled
	parts             []settledPart // for the reports after the commit
}

// settledPart is the settled rows of one batch.
type settledPart struct {
	events    []model.Event
	charges   []charge
	cancelled map[int]bool
}

// add adds the first n rows of the done batch b to s, by their outcomes (tallyBatch): the delivered ones;
// the keyed ones, the ones released before a row that reached Redis and the failed ones to hand over to
// the exception queue (the task's own failures charged, the outages not: they fail the round); the
// cancels to settle.
func (s *streamSettled) add(cfg *Config, b *streamBatch, n int, res *BatchEvent) {
	events := b.read.events[:n]
	t := tallyBatch(cfg, events, b.errs[:n], b.read.cancelled)
	s.delivered += t.delivered
	for _, i := range t.cancels {
		s.cancels = append(s.cancels, events[i].ID)
	}
	// A released row lies before a row that reached Redis (a stop, see streamPass.settled): the cursor
	// moves past both, so the row goes to the per-row path, uncharged, to be enqueued once.
	for _, is := range [][]int{t.handOver, t.released, t.outages} {
		for _, i := range is {
			s.handOver = append(s.handOver, events[i].ID)
		}
	}
	for _, c := range t.charges {
		s.handOver = append(s.handOver, c.ID)
	}
	t.failOutage(res)
	s.charges = append(s.charges, storeCharges(t.charges)...)
	s.parts = append(s.parts, settledPart{events: events, charges: t.charges, cancelled: b.read.cancelled})
	s.rows += n
	s.lastXid, s.lastID = b.read.xids[n-1], events[n-1].ID
	for i := range events {
		s.maxID = max(s.maxID, events[i].ID)
	}
}

// errCancelled marks a row the stream read cancelled: it is never enqueued.
var errCancelled = errors.New("relay: cancelled before it was delivered")

// testLocked calls the tests' streamState.locked hook, if any, and returns its release, callable more
// than once; without a hook it does nothing.
func (sr *streamReader) testLocked(lane string) (release func()) {
	if sr.state.locked == nil {
		return func() {}
	}
	return sync.OnceFunc(sr.state.locked(lane))
}

// bounds are a stream round's bounds (Config.bounds) with, set in the same statement and for the round's
// transaction only (set_config's is_local, safe behind a transaction pooler; any role may set them):
//
//   - synchronous_commit off: a cursor move lost in a database crash only means its rows are enqueued
//     again, which their TaskIDs absorb, as for the per-row marks (store.Marks.Unsynced);
//   - enable_bitmapscan and enable_sort off: the read (store.StreamReadSQL) asks for the pair's next rows in the
//     index's order, and the index is what serves it. With statistics that sampled few of the pair's rows
//     (an ANALYZE of a large table), the planner took them for a few and chose to read every remaining row
//     of the pair with a bitmap scan and sort them, at each read: 1,364 buffers and 63 ms for a read of 500
//     with 10 M rows kept, against about 20 buffers (TestStreamReadKeepsToTheIndex). The other statements of
//     the round look rows up by primary key;
//   - jit off: a statement whose estimated cost passes jit_above_cost (a large table's statistics) is
//     compiled at each run, 30 ms and more, for a read of a few milliseconds (see indexOrderSettings).
func (sr *streamReader) bounds() sessionBounds {
	b := sr.cfg.bounds()
	const settings = "('synchronous_commit', 'off'), " + indexOrderSettings
	if b.sql == "" {
		b.sql = setLocalSQL(settings)
		return b
	}
	b.sql = strings.Replace(b.sql, "(VALUES ", "(VALUES "+settings+", ", 1)
	return b
}
