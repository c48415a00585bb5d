package relay

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
)

// cleanupLoop deletes expired published rows now and then every CleanupInterval.
func (r *Relay) cleanupLoop(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.CleanupInterval)
	defer ticker.Stop()
	for {
		if _, err := r.cleanup(ctx); err != nil && ctx.Err() == nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: cleanup failed", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// cleanup deletes the rows published more than PublishedRetention ago, CleanupBatchSize per statement so that no
// statement holds many locks or runs long, and returns how many it deleted. A row with a ProcessAt is kept
// until PublishedRetention after that time, so that the reconciler can check a task scheduled far ahead and
// `bunbox status` counts it; a keyed row is kept until it completed (an unfinished one holds its key).
//
// Streamed rows (EnableStream) have no publish time: one the cursor has delivered is deleted once it was
// created more than PublishedRetention ago (created_at; it was delivered after that, so it is kept at least
// as long as a row of the per-row path, less the time it waited in the stream), with the same ProcessAt
// and key rules; a waiting one is never deleted. The cursor's moved_at is no clock for this: it moves
// with every round, so under traffic no row would ever be old enough. See cleanupStream.
func (r *Relay) cleanup(ctx context.Context) (int64, error) {
	cutoff := r.cfg.now().Add(-r.cfg.PublishedRetention)
	var total int64
	for ctx.Err() == nil {
		n, err := r.cleanupBatch(ctx, cutoff)
		if err != nil {
			return total, err
		}
		total += n
		r.counters.cleaned.Add(n)
		if n < int64(r.cfg.CleanupBatchSize) {
			break
		}
	}
	n, err := r.cleanupStream(ctx, cutoff)
	total += n
	if err != nil {
		return total, err
	}
	if total > 0 {
		r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: deleted published rows past retention",
			slog.Int64("rows", total), slog.Duration("retention", r.cfg.PublishedRetention))
	}
	return total, nil
}

// cleanupSQL deletes up to ?1 rows published before ?0, oldest first. It reads
// outbox_events_published_at_idx, which leaves the streamed rows ('infinity') out: PostgreSQL proves
// that published_at < ?0 leaves them out too, as ?0 is a time that bun writes into the query.
const cleanupSQL = `DELETE FROM outbox_events WHERE id IN (
  SELECT id FROM outbox_events WHERE published_at < ?0 AND (process_at IS NULL OR process_at < ?0)
    AND (ordering_key IS NULL OR completed_at IS NOT NULL)
  ORDER BY published_at LIMIT ?1 FOR UPDATE SKIP LOCKED)`

// cleanupBatch deletes up to CleanupBatchSize rows published before cutoff, in a transaction of its own with
// the relay's bounds (session.go), and returns how many it deleted.
func (r *Relay) cleanupBatch(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := r.inBoundedTx(ctx, func(tx bun.Tx) error {
		res, err := tx.NewRaw(r.names.SQL(cleanupSQL), cutoff, r.cfg.CleanupBatchSize).Exec(ctx)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// cleanupStreamSQL deletes streamed rows the cursor's last finished snapshot has passed (streamsql.Passed)
// that were created before ?0, among the next ?1 such rows after (?2, ?3) in (xid, id) order: it reads
// them through outbox_events_stream_idx, (xid, id) WHERE published_at = 'infinity', as an index range.
// It returns how many it deleted, the last (xid, id) it read (NULL when none), how many it read, and
// whether the last one read was created at or after ?0. Rows delivered from the pair under way (snap_to)
// wait for a cleanup after the pair is done. The rows read are locked (SKIP LOCKED: a row another
// transaction holds is left for the next cleanup) and deleted only if still streamed, as read.
const cleanupStreamSQL = `WITH head AS (
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

// cleanupStream deletes the delivered streamed rows created before cutoff (see cleanup), CleanupBatchSize
// rows read per statement, each in a transaction of its own with the relay's bounds. It reads the
// stream's rows in (xid, id) order from the oldest, and stops at the end of what the cursor has passed
// or at a row created after cutoff: a transaction's rows get their xid at its first write, after its
// start (created_at), so the rows after that one were written after cutoff, but for those of a
// transaction that waited long before writing, which a later cleanup deletes. Rows that are kept (a
// ProcessAt ahead, an unfinished key) are read again by every cleanup, as the classic cleanup's index
// reads them.
func (r *Relay) cleanupStream(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	afterXID, afterID := "0", int64(0)
	for ctx.Err() == nil {
		var deleted, read int64
		var lastXID sql.NullString
		var lastID int64
		var young bool
		err := r.inBoundedTx(ctx, func(tx bun.Tx) error {
			return tx.NewRaw(r.names.SQL(cleanupStreamSQL), cutoff, r.cfg.CleanupBatchSize, afterXID, afterID).
				Scan(ctx, &deleted, &lastXID, &lastID, &read, &young)
		})
		if err != nil {
			return total, err
		}
		total += deleted
		r.counters.cleaned.Add(deleted)
		if read < int64(r.cfg.CleanupBatchSize) || young || !lastXID.Valid {
			break
		}
		afterXID, afterID = lastXID.String, lastID
	}
	return total, nil
}

// inBoundedTx runs fn in a transaction of its own with the relay's bounds (session.go) and commits it.
func (r *Relay) inBoundedTx(ctx context.Context, fn func(tx bun.Tx) error) error {
	tx, err := beginBounded(ctx, r.db, r.cfg.bounds())
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
