package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
)

// The cursor's snapshots and the rows' xid are transaction ids of the cluster that wrote them. On another
// cluster (a restore with pg_dump/pg_restore, logical replication, pg_upgrade, a blue/green move) new
// transactions may get ids that the old cursor counts as delivered, and the rows that waited at the move
// may have ids the new cluster reaches only much later: read with the old cursor, new events would be
// skipped without a word. So every stream round checks, in the statement that locks the cursor, that the
// cluster's system identifier is the cursor's and that the cluster's next transaction id is not behind the
// cursor's snapshots. When either fails, the round starts the cursor anew (resetCursor) instead of
// reading: under a lock that keeps writers out for the moment it takes, every streamed row the old cursor
// did not deliver goes to the per-row path, which delivers it once, the delivered ones the new cursor
// could misread leave the stream as published rows, and the cursor begins at a snapshot of this cluster.
//
// A row's delivery by the old cursor is trusted only when its id is at most the cursor's max_id (the
// largest id a round of this cluster read): a row written after a restore has a larger id, since the
// identity sequence is restored with the table, whatever its xid says.

// streamCluster checks the cluster of tx's round against its cursor (see lockCursor) and, when the
// database now runs on another cluster or transaction id space, starts the cursor anew and commits tx;
// moved reports that it did.
func (r *Relay) streamCluster(ctx context.Context, tx bun.Tx, cur streamCursor) (moved bool, err error) {
	why, err := cursorMoved(ctx, tx, cur)
	if why == "" || err != nil {
		return false, err
	}
	n, err := resetCursor(ctx, tx, r.names)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return false, fmt.Errorf("start the cursor anew (%s): %w", why, err)
	}
	logReset(ctx, r.log, r.names, why, n)
	return true, nil
}

// logReset says at Warn that the cursor of names started anew, why, and what it did to the rows.
func logReset(ctx context.Context, log *slog.Logger, names tables.Names, why string, n resetCounts) {
	log.LogAttrs(ctx, slog.LevelWarn, "bunbox: the outbox's database runs on another cluster or transaction id "+
		"space than its stream cursor ("+why+"): the streamed rows not yet delivered were handed to the "+
		"per-row path, which delivers each once, and the cursor starts anew on this cluster",
		slog.String("table", names.Outbox()), slog.Int64("handed_over", n.handedOver),
		slog.Int64("marked_published", n.published))
	if n.marksKept {
		log.LogAttrs(ctx, slog.LevelWarn, "bunbox: the role may not delete the reconciler's time marks of the old "+
			"cluster from "+names.Qualify("bunbox_stream_marks")+": until they expire (TaskRetention) a reconciler "+
			"may not look for lost tasks of the newest streamed events; delete them as the table's owner, or "+
			"GRANT SELECT, INSERT, DELETE on it to the relay's role")
	}
}

// cursorMoved says why the cursor cur, locked in tx, belongs to another cluster or transaction id space
// than tx, "" when it does not.
func cursorMoved(ctx context.Context, tx bun.Tx, cur streamCursor) (string, error) {
	why := clusterChange(cur)
	if why == "" || (cur.cursorSystem.Valid && cur.cursorSystem.Int64 != cur.system.Int64) {
		return why, nil
	}
	// The same cluster, its counter behind the cursor: the lock statement's snapshot may predate the
	// commit of the round that moved the cursor last. Ask again, now that the row is locked.
	if err := tx.QueryRowContext(ctx, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text").Scan(&cur.xmax); err != nil {
		return "", err
	}
	return clusterChange(cur), nil
}

// checkCursor waits for the cursor row of names in tx and starts it anew when it belongs to another
// cluster (see cursorMoved), for EnableStream and DisableStream, which read or keep the cursor.
func checkCursor(ctx context.Context, tx bun.Tx, names tables.Names, log *slog.Logger) error {
	q := strings.Replace(lockCursorSQL, "SKIP LOCKED", "", 1)
	var cur streamCursor
	err := tx.QueryRowContext(ctx, names.SQL(q)).Scan(&cur.from, &cur.to, &cur.afterXid, &cur.afterID,
		&cur.cursorSystem, &cur.system, &cur.xmax)
	if err == sql.ErrNoRows {
		return nil
	}
	if err != nil {
		return err
	}
	why, err := cursorMoved(ctx, tx, cur)
	if why == "" || err != nil {
		return err
	}
	n, err := resetCursor(ctx, tx, names)
	if err != nil {
		return fmt.Errorf("start the cursor anew (%s): %w", why, err)
	}
	logReset(ctx, log, names, why, n)
	return nil
}

// clusterChange says why cur's cursor belongs to another cluster than its round's, "" when it does not.
func clusterChange(cur streamCursor) string {
	switch {
	case cur.cursorSystem.Valid && cur.system.Valid && cur.cursorSystem.Int64 != cur.system.Int64:
		return fmt.Sprintf("system identifier %d, the cursor's %d", cur.system.Int64, cur.cursorSystem.Int64)
	case !cur.cursorSystem.Valid && cur.system.Valid:
		return "the cursor has no system identifier"
	}
	next, err1 := strconv.ParseUint(cur.xmax, 10, 64)
	for _, snap := range []string{cur.from.String, cur.to.String} {
		if snap == "" || err1 != nil {
			continue
		}
		if x, err := strconv.ParseUint(snapshotXmax(snap), 10, 64); err == nil && next < x {
			return fmt.Sprintf("next transaction id %d, behind the cursor's %d", next, x)
		}
	}
	return ""
}

// resetCounts is what resetCursor did.
type resetCounts struct {
	handedOver, published int64
	marksKept             bool // the role may not delete the reconciler's time marks
}

// handOverWaitingSet is the SET of an UPDATE of outbox_events e that hands streamed rows to the per-row
// path: pending rows from then on. A row cancelled while it waited was never enqueued: its cancel is
// settled as bunx settles a pending row's (its result is the UPDATE's one argument, cancelNeverPublished).
const handOverWaitingSet = `SET published_at = NULL,
  cancel_settled_at = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL THEN now() ELSE e.cancel_settled_at END,
  cancel_result = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL THEN ? ELSE e.cancel_result END,
  completed_at = CASE WHEN e.cancelled_at IS NOT NULL AND e.cancel_settled_at IS NULL AND e.ordering_key IS NOT NULL
    THEN coalesce(e.completed_at, now()) ELSE e.completed_at END`

// resetSQL are resetCursor's statements, in order: the lock that keeps writers out (their rows would be
// written between the reads of the old cursor and the new one's snapshot); the hand-over of every streamed
// row the old cursor did not deliver, or whose delivery it cannot vouch for (an id past max_id); the
// delivered rows whose xid the new cursor could take for waiting leave the stream as published at the
// cursor's last move; the cursor starts at a snapshot of this cluster. (resetCursor then deletes the
// reconciler's time marks of the old id space, when the role may.)
var resetSQL = []string{
	`LOCK TABLE outbox_events IN SHARE ROW EXCLUSIVE MODE`,
	`UPDATE outbox_events e ` + handOverWaitingSet + `
FROM bunbox_stream s WHERE s.name = 'outbox' AND e.published_at = ` + streamsql.Sentinel + `
  AND NOT (e.id <= coalesce(s.max_id, 0) AND ` + streamsql.Delivered + `)`,
	`UPDATE outbox_events e SET published_at = s.moved_at FROM bunbox_stream s
WHERE s.name = 'outbox' AND e.published_at = ` + streamsql.Sentinel + `
  AND e.xid >= pg_snapshot_xmin(pg_current_snapshot())`,
	`UPDATE bunbox_stream SET snap_from = pg_current_snapshot(), snap_to = NULL, after_xid = NULL, after_id = NULL,
  system_id = (SELECT system_identifier FROM pg_control_system()), max_id = (SELECT max(id) FROM outbox_events),
  moved_at = now()
WHERE name = 'outbox'`,
}

// resetCursor starts the cursor of names anew in tx, which holds its row (see resetSQL), waiting at most
// streamLockTimeout for the outbox table's lock.
func resetCursor(ctx context.Context, tx bun.Tx, names tables.Names) (n resetCounts, err error) {
	if _, err := tx.ExecContext(ctx, "SELECT set_config('lock_timeout', '"+streamLockTimeout+"', true)"); err != nil {
		return n, err
	}
	for i, query := range resetSQL {
		var args []any
		if i == 1 {
			args = []any{cancelNeverPublished}
		}
		res, err := tx.ExecContext(ctx, names.SQL(query), args...)
		if err != nil {
			return n, err
		}
		switch i {
		case 1:
			n.handedOver, _ = res.RowsAffected()
		case 2:
			n.published, _ = res.RowsAffected()
		}
	}
	// A time mark pairs a time with a next xid of the old id space, where the reconciler would start its
	// read of the stream too late. A role that may not delete them (the reconciler's marks are optional,
	// see reconcile_marks.go) leaves them to expire after TaskRetention, and says so.
	var may bool
	if err := tx.QueryRowContext(ctx, names.SQL(`SELECT coalesce(has_table_privilege(to_regclass('bunbox_stream_marks'), 'DELETE'), false)`)).Scan(&may); err != nil {
		return n, err
	}
	if !may {
		n.marksKept = true
		return n, nil
	}
	_, err = tx.ExecContext(ctx, names.SQL(`DELETE FROM bunbox_stream_marks`))
	return n, err
}
