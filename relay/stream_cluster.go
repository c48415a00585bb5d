package relay

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
)

// The cursor's snapshots and the rows' xid are transaction ids of the cluster that wrote them. On another
// cluster (a restore with pg_dump/pg_restore, logical replication, pg_upgrade, a blue/green move) new
// transactions may get ids that the old cursor counts as delivered, and the rows that waited at the move
// may have ids the new cluster reaches only much later: read with the old cursor, new events would be
// skipped without a word. So every stream round checks, in the statement that reads the locked cursor, that the
// cluster's system identifier is the cursor's and that the cluster's next transaction id is not behind the
// cursor's snapshots. When either fails, the round starts the cursor anew (store.Stream.ResetCursor) instead of
// reading: under a lock that keeps writers out for the moment it takes, every streamed row the old cursor
// did not deliver goes to the per-row path, which delivers it once, the delivered ones the new cursor
// could misread leave the stream as published rows, and the cursor begins at a snapshot of this cluster.
//
// A row's delivery by the old cursor is trusted only when its id is at most the cursor's max_id (the
// largest id a round of this cluster read): a row written after a restore has a larger id, since the
// identity sequence is restored with the table, whatever its xid says.

// cluster checks the cluster of tx's round against its cursor (read after its row was locked, see
// store.Stream.LockCursor, so the next transaction id read with it is not older than its last move) and, when the
// database now runs on another cluster or transaction id space, starts every cursor anew in tx
// (streamReader.resetIn), which it commits; moved reports that the round is over.
func (sr *streamReader) cluster(ctx context.Context, tx bun.Tx, cur streamCursor) (moved bool, err error) {
	if clusterChange(cur) == "" {
		return false, nil
	}
	return true, sr.resetIn(ctx, tx, cur.Name)
}

// resetIn starts every cursor anew (store.Stream.ResetCursor) in tx, which holds the cursor row name, and
// commits: it waits for every other cursor row (rounds of other lanes may be under way; two rounds that
// reset at once meet in a deadlock, which PostgreSQL breaks by failing one), then reads name's row again
// and resets only when it still belongs to another cluster (another round may have reset meanwhile).
func (sr *streamReader) resetIn(ctx context.Context, tx bun.Tx, name string) error {
	if err := sr.st.LockAll(ctx, tx); err != nil {
		return err
	}
	var cur store.Cursor
	var ok bool
	var err error
	if name == "outbox" {
		cur, ok, err = sr.st.LockCursor(ctx, tx, true)
	} else {
		cur, ok, err = sr.st.LockLane(ctx, tx, []string{name})
	}
	if err != nil || !ok {
		return err // another round started the cursors anew: the lane is gone
	}
	why := clusterChange(cur)
	if why == "" {
		return nil
	}
	n, err := sr.st.ResetCursor(ctx, tx, streamLockTimeout, cancelNeverPublished)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("start the cursor anew (%s): %w", why, err)
	}
	logReset(ctx, sr.log, sr.names, why, n)
	return nil
}

// logReset says at Warn that the cursor of names started anew, why, and what it did to the rows.
func logReset(ctx context.Context, log *slog.Logger, names tables.Names, why string, n store.Reset) {
	log.LogAttrs(ctx, slog.LevelWarn, "bunbox: the outbox's database runs on another cluster or transaction id "+
		"space than its stream cursor ("+why+"): the streamed rows not yet delivered were handed to the "+
		"per-row path, which delivers each once, and the cursor starts anew on this cluster",
		slog.String("table", names.Outbox()), slog.Int64("handed_over", n.HandedOver),
		slog.Int64("marked_published", n.Published))
	if n.MarksKept {
		log.LogAttrs(ctx, slog.LevelWarn, "bunbox: the role may not delete the reconciler's time marks of the old "+
			"cluster from "+names.Qualify("bunbox_stream_marks")+": until they expire (TaskRetention) a reconciler "+
			"may not look for lost tasks of the newest streamed events; delete them as the table's owner, or "+
			"GRANT SELECT, INSERT, DELETE on it to the relay's role")
	}
}

// checkCursor waits for the cursor row of names in tx and starts it anew when it belongs to another
// cluster (see clusterChange), for EnableStream and DisableStream, which read or keep the cursor.
func checkCursor(ctx context.Context, tx bun.Tx, names tables.Names, log *slog.Logger) error {
	st := store.NewStream(names)
	cur, ok, err := st.LockCursor(ctx, tx, true)
	if !ok || err != nil {
		return err
	}
	why := clusterChange(cur)
	if why == "" {
		return nil
	}
	if err := st.LockAll(ctx, tx); err != nil {
		return err
	}
	n, err := st.ResetCursor(ctx, tx, streamLockTimeout, cancelNeverPublished)
	if err != nil {
		return fmt.Errorf("start the cursor anew (%s): %w", why, err)
	}
	logReset(ctx, log, names, why, n)
	return nil
}

// clusterChange says why cur's cursor belongs to another cluster than its round's, "" when it does not.
func clusterChange(cur streamCursor) string {
	switch {
	case cur.CursorSystem.Valid && cur.System.Valid && cur.CursorSystem.Int64 != cur.System.Int64:
		return fmt.Sprintf("system identifier %d, the cursor's %d", cur.System.Int64, cur.CursorSystem.Int64)
	case !cur.CursorSystem.Valid && cur.System.Valid:
		return "the cursor has no system identifier"
	}
	next, err1 := strconv.ParseUint(cur.Xmax, 10, 64)
	for _, snap := range []string{cur.From.String, cur.To.String} {
		if snap == "" || err1 != nil {
			continue
		}
		if x, err := strconv.ParseUint(store.SnapshotXmax(snap), 10, 64); err == nil && next < x {
			return fmt.Sprintf("next transaction id %d, behind the cursor's %d", next, x)
		}
	}
	return ""
}
