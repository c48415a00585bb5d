package relay

import (
	"context"
	"errors"
	"log/slog"

	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/internal/store"
)

// positionsRotateAfter is how many cursor positions the relay lets the positions' table keep before it
// rotates them (store.Stream.Rotate): a move inserts a position and deletes none, so at 50 moves a
// second (1,000 events/s) a relay rotates about every 20 s, and the table keeps up to about this many
// rows, whatever the xmin horizon.
const positionsRotateAfter = 1000

// rotateLockTimeout bounds how long a rotation waits for the cursor rows (the rounds under way finish
// first) and for its partition's lock: a rotation that waits longer gives up, and the next check tries
// again, so that it never holds the stream's rounds back for long.
const rotateLockTimeout = "500ms"

// rotateMissedWarn is how many rotations in a row may give up on a lock before the relay says so at Warn
// (and again after as many more): the positions are kept, and grow, until one gets through.
const rotateMissedWarn = 60

// rotate rotates the cursors' positions (store.Stream.Rotate) when they are more than the relay's
// rotateAfter, in a transaction of its own that holds every cursor row: the rounds of every lane wait
// for it. A rotation that met a lock held too long is left to the next check; any other failure is
// logged at Warn.
func (sr *streamReader) rotate(ctx context.Context) {
	after := sr.state.rotateAfter
	if after == 0 {
		after = positionsRotateAfter
	}
	if n, err := sr.st.CountPositions(ctx, sr.db); err != nil || n <= after {
		sr.rotateFailed(ctx, err)
		return
	}
	tx, err := beginBounded(ctx, sr.db, sr.cfg.bounds())
	if err != nil {
		sr.rotateFailed(ctx, err)
		return
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '"+rotateLockTimeout+"'"); err != nil {
		sr.rotateFailed(ctx, err)
		return
	}
	if err := sr.st.LockAll(ctx, tx); err != nil {
		sr.rotateFailed(ctx, err)
		return
	}
	r, err := sr.st.Rotate(ctx, tx, after)
	if err == nil && r.Rotated {
		err = tx.Commit()
	}
	if err != nil {
		sr.rotateFailed(ctx, err)
		return
	}
	sr.state.rotateMissed.Store(0)
	if r.Deleted && sr.state.noTruncateLogged.CompareAndSwap(false, true) {
		sr.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: the relay's role may not truncate the partitions of "+
			sr.names.Qualify("bunbox_stream_positions")+" (GRANT TRUNCATE ON "+sr.names.Qualify("bunbox_stream_positions_0")+
			", "+sr.names.Qualify("bunbox_stream_positions_1")+" TO the relay's role): it deletes the cursors' old "+
			"positions instead, which stay as dead tuples while a transaction holds the xmin horizon",
			slog.String("table", sr.names.Outbox()))
	}
	if r.Rotated {
		sr.log.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: rotated the stream cursors' positions",
			slog.Int64("emptied", r.Left), slog.Bool("deleted", r.Deleted), slog.String("table", sr.names.Outbox()))
	}
}

// rotateFailed logs a rotation's failure at Warn, unless it is none or the relay is stopping: a lock held
// longer than rotateLockTimeout only after rotateMissedWarn such tries in a row (the next check tries
// again), a role's missing privilege once.
func (sr *streamReader) rotateFailed(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	if pgerr.Is(err, "55P03") {
		every := sr.state.rotateWarnAfter
		if every == 0 {
			every = rotateMissedWarn
		}
		if n := sr.state.rotateMissed.Add(1); n%every == 0 {
			sr.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: the stream cursors' positions could not be rotated: "+
				"each try met a lock held longer than "+rotateLockTimeout+" (stream rounds, or a transaction on "+
				sr.names.Qualify("bunbox_stream_positions")+"); the positions are kept until a try gets through",
				slog.Int64("tries", n), slog.String("table", sr.names.Outbox()))
		}
		return
	}
	if errors.Is(err, store.ErrRotatePrivilege) && !sr.state.noTruncateLogged.CompareAndSwap(false, true) {
		return // said once
	}
	sr.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: rotate the stream cursors' positions", slog.Any("err", err),
		slog.String("table", sr.names.Outbox()))
}
