package relay

import (
	"context"
	"log/slog"
	"time"
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
	if total > 0 {
		r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: deleted published rows past retention",
			slog.Int64("rows", total), slog.Duration("retention", r.cfg.PublishedRetention))
	}
	return total, nil
}

// cleanupBatch deletes up to CleanupBatchSize rows published before cutoff, in a transaction of its own with
// the relay's bounds (session.go), and returns how many it deleted.
func (r *Relay) cleanupBatch(ctx context.Context, cutoff time.Time) (int64, error) {
	tx, err := beginBounded(ctx, r.db, r.cfg.bounds())
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.NewRaw(r.names.SQL(`DELETE FROM outbox_events WHERE id IN (
  SELECT id FROM outbox_events WHERE published_at < ?0 AND (process_at IS NULL OR process_at < ?0)
    AND (ordering_key IS NULL OR completed_at IS NOT NULL)
  ORDER BY published_at LIMIT ?1 FOR UPDATE SKIP LOCKED)`),
		cutoff, r.cfg.CleanupBatchSize).Exec(ctx)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return n, nil
}
