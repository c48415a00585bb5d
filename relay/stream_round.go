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
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// errHandOver marks a row the stream does not enqueue but hands to the per-row path: a row with an
// ordering key, which the keyed per-row path delivers in its key's order.
var errHandOver = errors.New("relay: handed to the per-row path")

// streamRound delivers the next batches of the stream (see stream.go), in one transaction with the bounds
// of every round (session.go):
//
//  1. lock the cursor row (SKIP LOCKED: when another relay holds it, there is nothing to do here);
//  2. open a pair of snapshots if none is open (to := pg_current_snapshot()), unless nothing committed
//     since from;
//  3. read the pair's next rows after the cursor's position, in (xid, id) order, within BatchSize and
//     BatchBytes (streamReadSQL);
//  4. enqueue them as a per-row round does (deliver: the same tasks, options, spans and Observer calls),
//     with no mark per row, while reading the pair's next batch, up to streamRoundBatches batches
//     (readAhead, stream_ahead.go);
//  5. hand to the per-row path (published_at NULL) the keyed rows and the rows whose enqueue failed, the
//     latter charged an attempt as a per-row round charges them (markFailed) when the failure is the
//     task's own, and not charged when it is an outage; settle the cancels of the rows it read cancelled,
//     which it never enqueues (cancelNeverPublished);
//  6. move the cursor past the rows read (a pair read to its end is finished: from := to) and commit.
//
// A round that dies before its commit (a crash, a partition ended by the session bounds, a terminated
// backend) releases the cursor row with its lock: the next stream round reads the same rows again and
// their TaskIDs absorb the second enqueue, as for a per-row round that dies after its enqueues. A relay
// that is stopped in the middle of a round moves the cursor past the last row it tried and no further,
// and hands the rows it did not try before that one to the per-row path, so that a stop enqueues nothing
// twice; a batch whose enqueues all met an outage ends the round before it, its rows still in the stream.
// The round is one BatchEvent (Observer.OnBatch) for all its batches.
func (r *Relay) streamRound(ctx context.Context) (res BatchEvent) {
	start := r.cfg.now()
	defer func() {
		res.Duration = r.cfg.now().Sub(start)
		r.record(ctx, res)
	}()
	if ctx.Err() != nil {
		return res
	}
	bg := context.WithoutCancel(ctx) // the cursor of what was enqueued has to be written
	bounds := r.streamBounds()
	tx, err := beginBounded(bg, r.db, bounds)
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

	cur, ok, err := lockCursor(ctx, tx, r.names.SQL)
	if err != nil {
		return failed("lock the cursor", err)
	}
	if !ok {
		return res // another relay streams
	}
	if moved, err := r.streamCluster(bg, tx, cur); err != nil || moved {
		if err != nil {
			return failed("check the cursor's cluster", err)
		}
		return res // the cursor started anew: the next round reads from it
	}
	release := r.testLocked() // before the deferred rollback, and before the commit
	defer release()
	opened := false
	if !cur.to.Valid {
		to, err := currentSnapshot(ctx, tx)
		if err != nil {
			return failed("snapshot", err)
		}
		if to == cur.from.String {
			return res // nothing committed since from
		}
		cur.to, opened = sql.NullString{String: to, Valid: true}, true
	}
	read, err := r.readStreamBatch(ctx, tx, cur)
	if err != nil {
		return failed("read", err)
	}
	if len(read.events) == 0 {
		r.stream.spare.keep(read.events)
		if opened {
			return res // the new pair holds nothing yet: nothing to write
		}
		release()
		if err := commitStream(bg, tx, r.names.SQL, cur, "", 0, true, 0); err != nil { // the open pair's rest was empty
			return failed("move the cursor", err)
		}
		return res
	}
	p := r.readAhead(ctx, tx, bounds, cur, read)
	defer p.recycle(&r.stream.spare) // after the reports: nothing of the pass is used past the round
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
		r.settleBatch(&s, b, n, &res) // an outage sets res.Err: the relay backs off
	}
	res.Err = errors.Join(res.Err, left)
	r.stream.handedOver.Store(len(s.handOver) > 0)
	if err := handOverRows(bg, tx, r.names.SQL, s.handOver); err != nil {
		return writeFailed("hand over", err)
	}
	if err := markFailed(bg, tx, r.names, s.fails); err != nil {
		return writeFailed("mark failed", err)
	}
	if err := settleCancels(bg, tx, r.names.SQL, s.cancels); err != nil {
		return writeFailed("settle cancels", err)
	}
	done := cut == res.Claimed && !p.full
	release()
	if err := commitStream(bg, tx, r.names.SQL, cur, s.lastXid, s.lastID, done, s.maxID); err != nil {
		return writeFailed("move the cursor", err)
	}
	res.Published = s.delivered
	charged := 0
	for _, part := range s.parts {
		r.reportSettled(bg, part.events, part.d, part.fails, &res)
		charged += res.Failed
		for i := range part.events {
			if part.cancelled[i] {
				ev := &part.events[i]
				r.log.LogAttrs(bg, slog.LevelInfo, "bunbox relay: cancelled event: "+cancelNeverPublished,
					slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
					slog.String("task_type", ev.Name), slog.String("queue", ev.Queue), slog.Int("tasks_removed", 0))
			}
		}
	}
	res.Failed = charged
	return res
}

// streamSettled is what a stream round writes and reports for the rows it settles, gathered batch by
// batch.
type streamSettled struct {
	rows              int     // rows settled so far
	handOver, cancels []int64 // ids of the rows to hand over, and of the cancelled rows whose cancel to settle
	fails             []failure
	delivered         int
	lastXid           string // the last row settled, where the cursor moves to
	lastID            int64
	maxID             int64         // the largest id settled
	parts             []settledPart // for the reports after the commit
}

// settledPart is the settled rows of one batch.
type settledPart struct {
	events    []model.Event
	d         delivery
	fails     []failure
	cancelled map[int]bool
}

// settleBatch adds the first n rows of the done batch b to s: the delivered ones, the keyed and failed
// ones to hand over (the failures charged by the retry policy when the task's own, see failures), the
// cancels to settle.
func (r *Relay) settleBatch(s *streamSettled, b *streamBatch, n int, res *BatchEvent) {
	events := b.read.events[:n]
	d := delivery{errs: b.errs[:n]}
	for i, err := range d.errs {
		switch {
		case err == nil:
			s.delivered++
		case errors.Is(err, errCancelled):
			if b.read.cancelled[i] {
				s.cancels = append(s.cancels, events[i].ID)
			}
		case errors.Is(err, errHandOver), errors.Is(err, errReleased):
			// A released row lies before a row that reached Redis (a stop, see streamPass.settled): the
			// cursor moves past both, so the row goes to the per-row path, uncharged, to be enqueued once.
			s.handOver = append(s.handOver, events[i].ID)
		default:
			d.failed = append(d.failed, i)
			s.handOver = append(s.handOver, events[i].ID)
		}
	}
	before := res.Err
	res.Err = nil
	fails := r.failures(events, d, res)
	res.Err = errors.Join(before, res.Err)
	s.fails = append(s.fails, fails...)
	s.parts = append(s.parts, settledPart{events: events, d: d, fails: fails, cancelled: b.read.cancelled})
	s.rows += n
	s.lastXid, s.lastID = b.read.xids[n-1], events[n-1].ID
	for i := range events {
		s.maxID = max(s.maxID, events[i].ID)
	}
}

// errCancelled marks a row the stream read cancelled: it is never enqueued.
var errCancelled = errors.New("relay: cancelled before it was delivered")

// settleCancelsSQL settles the cancels of streamed rows the stream passed without enqueueing them, as
// bunx's cancel settles a pending row's: never published, and a keyed one completed so that it does not
// hold its key. A cancel settled meanwhile (by a relay of an older release) is kept. Arguments: the
// result, the ids.
const settleCancelsSQL = `UPDATE outbox_events SET cancel_settled_at = now(), cancel_result = ?,
  completed_at = CASE WHEN ordering_key IS NOT NULL THEN coalesce(completed_at, now()) ELSE completed_at END
WHERE id = ANY(?) AND cancel_settled_at IS NULL`

func settleCancels(ctx context.Context, tx bun.Tx, q func(string) string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.NewRaw(q(settleCancelsSQL), cancelNeverPublished, pgdialect.Array(ids)).Exec(ctx)
	return err
}

// moveCursorSQL writes the cursor's new place: the pair (from, to) and the position in it, and raises
// max_id to the largest id of the rows the round read (see stream_cluster.go). Arguments: from, to, the
// position's xid and id (NULL when no pair is open), the largest id read (NULL: none).
const moveCursorSQL = `UPDATE bunbox_stream SET snap_from = ?::pg_snapshot, snap_to = ?::pg_snapshot,
  after_xid = ?::xid8, after_id = ?::bigint, max_id = greatest(max_id, ?::bigint), moved_at = now()
WHERE name = 'outbox'`

// commitStream moves the cursor of tx's round to the position (xid, id) in its pair, or past the pair
// when done, records maxID (the largest id the round read; 0: none), and commits.
func commitStream(ctx context.Context, tx bun.Tx, q func(string) string, cur streamCursor, xid string, id int64, done bool, maxID int64) error {
	var most any
	if maxID > 0 {
		most = maxID
	}
	args := []any{cur.from.String, cur.to.String, xid, id, most}
	if done {
		args = []any{cur.to.String, nil, nil, nil, most}
	}
	if _, err := tx.ExecContext(ctx, q(moveCursorSQL), args...); err != nil {
		return err
	}
	return tx.Commit()
}

// handOverSQL gives rows of the stream to the per-row path: they are pending rows from then on. A row
// that left the stream meanwhile (DisableStream, or a key tracker of an older release) is not touched.
const handOverSQL = `UPDATE outbox_events SET published_at = NULL
WHERE id = ANY(?) AND published_at = ` + streamsql.Sentinel

func handOverRows(ctx context.Context, tx bun.Tx, q func(string) string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.NewRaw(q(handOverSQL), pgdialect.Array(ids)).Exec(ctx)
	return err
}

// testLocked calls the tests' streamState.locked hook, if any, and returns its release, callable more
// than once; without a hook it does nothing.
func (r *Relay) testLocked() (release func()) {
	if r.stream.locked == nil {
		return func() {}
	}
	return sync.OnceFunc(r.stream.locked())
}

// streamBounds are the round's bounds (Config.bounds) with, set in the same statement and for the round's
// transaction only (set_config's is_local, safe behind a transaction pooler; any role may set them):
//
//   - synchronous_commit off: a cursor move lost in a database crash only means its rows are enqueued
//     again, which their TaskIDs absorb, as for the per-row marks (markStream);
//   - enable_bitmapscan and enable_sort off: the read (streamReadSQL) asks for the pair's next rows in the
//     index's order, and the index is what serves it. With statistics that sampled few of the pair's rows
//     (an ANALYZE of a large table), the planner took them for a few and chose to read every remaining row
//     of the pair with a bitmap scan and sort them, at each read: 1,364 buffers and 63 ms for a read of 500
//     with 10 M rows kept, against about 20 buffers (TestStreamReadKeepsToTheIndex). The other statements of
//     the round look rows up by primary key;
//   - jit off: a statement whose estimated cost passes jit_above_cost (a large table's statistics) is
//     compiled at each run, 30 ms and more, for a read of a few milliseconds (see indexOrderSettings).
func (r *Relay) streamBounds() sessionBounds {
	b := r.cfg.bounds()
	const settings = "('synchronous_commit', 'off'), " + indexOrderSettings
	if b.sql == "" {
		b.sql = setLocalSQL(settings)
		return b
	}
	b.sql = strings.Replace(b.sql, "(VALUES ", "(VALUES "+settings+", ", 1)
	return b
}
