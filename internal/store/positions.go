package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
)

// The rotation of the cursors' positions (migration 20261211000001): a move inserts a position into the
// partition of the cursor's newest one and never deletes one, so a partition only grows. Once the
// positions are many, Rotate copies every cursor's newest position into the other partition and
// truncates the one it left, as PgQ rotates its event tables: TRUNCATE frees it whatever the xmin horizon,
// where deleted positions would stay as dead tuples for as long as a transaction holds it.

// countPositionsSQL counts the positions kept.
const countPositionsSQL = `SELECT count(*) FROM bunbox_stream_positions`

// rotateFromSQL names the partition to leave: the one with the most positions.
const rotateFromSQL = `SELECT part FROM bunbox_stream_positions GROUP BY part ORDER BY count(*) DESC, part LIMIT 1`

// rotateCopySQL copies into the partition ?0 the newest position of every cursor whose newest position
// is in the other one, numbered after it.
const rotateCopySQL = `INSERT INTO bunbox_stream_positions (` + streamsql.PositionColumns + `)
SELECT ?0::smallint, c.name, c.seq + 1, c.snap_from, c.snap_to, c.after_xid, c.after_id, c.system_id, c.max_id,
  c.moved_at
FROM ` + streamsql.CursorRows + ` c WHERE c.part <> ?0::smallint`

// rotatePrivilegesSQL reads whether the role may truncate the partition ?0 (by name) and delete from the
// positions' table.
const rotatePrivilegesSQL = `SELECT coalesce(has_table_privilege(to_regclass(?0), 'TRUNCATE'), false),
  coalesce(has_table_privilege(to_regclass('bunbox_stream_positions'), 'DELETE'), false)`

// ErrRotatePrivilege is wrapped by Rotate's error when the role may neither truncate the partition it
// leaves nor delete its positions.
var ErrRotatePrivilege = errors.New("may not rotate the stream cursors' positions")

// Rotation is what Stream.Rotate did.
type Rotation struct {
	Rotated bool  // the positions were many enough, and it rotated them
	Left    int64 // the positions in the partition it emptied
	// Deleted is true when it deleted the positions rather than truncating their partition: the role
	// may not truncate it, and the deleted positions stay as dead tuples until VACUUM removes them.
	Deleted bool
}

// CountPositions counts the positions the cursors keep.
func (s *Stream) CountPositions(ctx context.Context, db bun.IDB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, s.names.SQL(countPositionsSQL)).Scan(&n)
	return n, err
}

// Rotate moves the cursors' positions into the other partition and empties the one they leave, in tx,
// which holds every cursor row (LockAll: no round moves a cursor meanwhile), when more than after
// positions are kept. It truncates the partition it leaves, or, when the role may not, deletes its
// positions; when the role may do neither it fails, naming the GRANT, and changes nothing.
func (s *Stream) Rotate(ctx context.Context, tx bun.Tx, after int64) (r Rotation, err error) {
	n, err := s.CountPositions(ctx, tx)
	if err != nil || n <= after {
		return r, err
	}
	var from int16
	if err := tx.QueryRowContext(ctx, s.names.SQL(rotateFromSQL)).Scan(&from); err != nil {
		return r, err
	}
	partition := s.names.Qualify(fmt.Sprintf("bunbox_stream_positions_%d", from))
	var truncate, del bool
	if err := tx.QueryRowContext(ctx, s.names.SQL(rotatePrivilegesSQL), partition).Scan(&truncate, &del); err != nil {
		return r, err
	}
	if !truncate && !del {
		return r, fmt.Errorf("%w: the relay's role may neither truncate %s nor delete from %s: GRANT TRUNCATE ON %s, %s TO the relay's role",
			ErrRotatePrivilege, partition, s.names.Qualify("bunbox_stream_positions"), s.names.Qualify("bunbox_stream_positions_0"),
			s.names.Qualify("bunbox_stream_positions_1"))
	}
	if _, err := tx.ExecContext(ctx, s.names.SQL(rotateCopySQL), 1-from); err != nil {
		return r, err
	}
	if truncate {
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+partition).Scan(&r.Left); err != nil {
			return r, err
		}
		_, err = tx.ExecContext(ctx, "TRUNCATE "+partition)
	} else {
		var res interface{ RowsAffected() (int64, error) }
		res, err = tx.ExecContext(ctx, s.names.SQL(`DELETE FROM bunbox_stream_positions WHERE part = ?`), from)
		if err == nil {
			r.Left, _ = res.RowsAffected()
		}
	}
	r.Rotated, r.Deleted = err == nil, err == nil && !truncate
	return r, err
}
