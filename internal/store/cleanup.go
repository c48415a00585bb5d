package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
)

// The cleanup's statements: published, streamed and cancelled rows leave the table past their retention.

// deletePublishedSQL deletes up to ?1 rows published before ?0, oldest first. It reads
// outbox_events_published_at_idx, which leaves the streamed rows ('infinity') out: PostgreSQL proves
// that published_at < ?0 leaves them out too, as ?0 is a time that bun writes into the query.
const deletePublishedSQL = `DELETE FROM outbox_events WHERE id IN (
  SELECT id FROM outbox_events WHERE published_at < ?0 AND (process_at IS NULL OR process_at < ?0)
    AND (ordering_key IS NULL OR completed_at IS NOT NULL)
  ORDER BY published_at LIMIT ?1 FOR UPDATE SKIP LOCKED)`

// DeletePublished deletes up to limit rows published before cutoff, oldest first: a row with a ProcessAt is
// kept until cutoff passes that time too, a keyed row until it completed. It returns how many it deleted.
func DeletePublished(ctx context.Context, db bun.IDB, names tables.Names, cutoff time.Time, limit int) (int64, error) {
	res, err := db.NewRaw(names.SQL(deletePublishedSQL), cutoff, limit).Exec(ctx)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// deleteStreamedSQL deletes streamed rows the cursor's last finished snapshot has passed (streamsql.Passed)
// that were created before ?0, among the next ?1 such rows after (?2, ?3) in (xid, id) order: it reads
// them through outbox_events_stream_idx, (xid, id) WHERE published_at = 'infinity', as an index range.
// It returns how many it deleted, the last (xid, id) it read (NULL when none), how many it read, and
// whether the last one read was created at or after ?0. Rows delivered from the pair under way (snap_to)
// wait for a cleanup after the pair is done. The rows read are locked (SKIP LOCKED: a row another
// transaction holds is left for the next cleanup) and deleted only if still streamed, as read.
const deleteStreamedSQL = `WITH head AS (
  SELECT e.id, e.xid, e.created_at >= ?0 AS young,
    e.created_at < ?0 AND (e.process_at IS NULL OR e.process_at < ?0)
      AND (e.ordering_key IS NULL OR e.completed_at IS NOT NULL) AS expired
  FROM outbox_events e
  WHERE ` + streamsql.Passed + ` AND (e.xid, e.id) > (?2::xid8, ?3::bigint)
  ORDER BY e.xid, e.id LIMIT ?1 FOR UPDATE OF e SKIP LOCKED),
del AS (
  DELETE FROM outbox_events o USING head h WHERE o.id = h.id AND h.expired AND o.published_at = 'infinity' RETURNING o.id),
last AS (SELECT xid, id, young FROM head ORDER BY xid DESC, id DESC LIMIT 1)
SELECT (SELECT count(*) FROM del), (SELECT xid::text FROM last), coalesce((SELECT id FROM last), 0),
  (SELECT count(*) FROM head), coalesce((SELECT young FROM last), false)`

// StreamedPage is what one DeleteStreamed did.
type StreamedPage struct {
	Deleted int64          // rows deleted
	Read    int64          // rows read (and locked)
	LastXID sql.NullString // the xid of the last row read; NULL when none was
	LastID  int64          // its id
	Young   bool           // the last row read was created at or after the cutoff
}

// DeleteStreamed reads the next limit streamed rows the cursor has passed after (afterXID, afterID) in
// (xid, id) order and deletes those created before cutoff whose ProcessAt has passed it and, when keyed,
// that completed.
func DeleteStreamed(ctx context.Context, db bun.IDB, names tables.Names, cutoff time.Time, limit int, afterXID string, afterID int64) (StreamedPage, error) {
	var p StreamedPage
	err := db.NewRaw(names.SQL(deleteStreamedSQL), cutoff, limit, afterXID, afterID).
		Scan(ctx, &p.Deleted, &p.LastXID, &p.LastID, &p.Read, &p.Young)
	return p, err
}

// DeleteCancelled deletes up to limit settled cancelled rows cancelled before cutoff, oldest first, and
// returns how many it deleted.
func DeleteCancelled(ctx context.Context, db bun.IDB, names tables.Names, cutoff time.Time, limit int) (int64, error) {
	res, err := db.NewRaw(names.SQL(`DELETE FROM outbox_events WHERE id IN (
  SELECT id FROM outbox_events WHERE cancelled_at < ? AND cancel_settled_at IS NOT NULL
  ORDER BY cancelled_at LIMIT ? FOR UPDATE SKIP LOCKED)`), cutoff, limit).Exec(ctx)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}
