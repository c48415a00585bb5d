// Package cleanup deletes the rows the relay is done with once their retention has passed: published
// rows, streamed rows the cursor has delivered, and settled cancelled rows.
package cleanup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
)

// Defaults of the zero fields of a Config.
const (
	intervalDefault  = time.Minute
	batchSizeDefault = 1000
)

// Config tunes a Cleaner.
type Config struct {
	// Retention is how long a row is kept after it was published (a streamed row: created; a cancelled
	// row: cancelled). Required: positive.
	Retention time.Duration
	// Interval is the pause between two passes of Run. Defaults to 1m.
	Interval time.Duration
	// BatchSize is how many rows one statement deletes (or, of the stream, reads), 1 to 100000. Defaults
	// to 1000.
	BatchSize int
	// Bounds is the set_config statement of each transaction's server-side bounds (store.Begin). Defaults
	// to none.
	Bounds string
	// Logger receives the cleaner's logs. Defaults to one that discards them.
	Logger *slog.Logger
	// OnDeleted, when set, is called with the rows each statement deleted. Defaults to nil.
	OnDeleted func(n int64)
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	c.Interval = cmp.Or(c.Interval, intervalDefault)
	c.BatchSize = cmp.Or(c.BatchSize, batchSizeDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.OnDeleted == nil {
		c.OnDeleted = func(int64) {}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Retention <= 0 {
		errs = append(errs, fmt.Errorf("Retention must be positive, got %s", c.Retention))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("Interval must be positive, got %s", c.Interval))
	}
	if c.BatchSize < 1 || c.BatchSize > 100000 {
		errs = append(errs, fmt.Errorf("BatchSize must be between 1 and 100000, got %d", c.BatchSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleanup: invalid config: %w", err)
	}
	return nil
}

// Cleaner deletes the rows of one outbox past their retention.
type Cleaner struct {
	db    *bun.DB
	names tables.Names
	cfg   Config
}

// New returns a Cleaner of the outbox names on db, or an error naming the field of cfg that cannot work.
func New(db *bun.DB, names tables.Names, cfg Config) (*Cleaner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Cleaner{db: db, names: names, cfg: cfg}, nil
}

// Run deletes expired published rows now and then every Interval until ctx is done, and returns nil. A
// failed pass is logged and tried again at the next interval.
func (c *Cleaner) Run(ctx context.Context) error {
	ticker := time.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	for {
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: cleanup failed", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// RunOnce deletes the rows published more than Retention ago, BatchSize per statement so that no
// statement holds many locks or runs long, and returns how many it deleted. A row with a ProcessAt is kept
// until Retention after that time, so that the reconciler can check a task scheduled far ahead and
// `bunbox status` counts it; a keyed row is kept until it completed (an unfinished one holds its key).
//
// Streamed rows have no publish time: one the cursor has delivered is deleted once it was created more
// than Retention ago (created_at; it was delivered after that, so it is kept at least as long as a row of
// the per-row path, less the time it waited in the stream), with the same ProcessAt and key rules; a
// waiting one is never deleted. The cursor's moved_at is no clock for this: it moves with every round, so
// under traffic no row would ever be old enough. See streamed.
func (c *Cleaner) RunOnce(ctx context.Context) (int64, error) {
	cutoff := c.cfg.Now().Add(-c.cfg.Retention)
	var total int64
	for ctx.Err() == nil {
		var n int64
		err := store.InTx(ctx, c.db, c.cfg.Bounds, func(tx bun.Tx) error {
			var err error
			n, err = store.DeletePublished(ctx, tx, c.names, cutoff, c.cfg.BatchSize)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		c.cfg.OnDeleted(n)
		if n < int64(c.cfg.BatchSize) {
			break
		}
	}
	n, err := c.streamed(ctx, cutoff)
	total += n
	if err != nil {
		return total, err
	}
	if total > 0 {
		c.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: deleted published rows past retention",
			slog.Int64("rows", total), slog.Duration("retention", c.cfg.Retention))
	}
	return total, nil
}

// streamed deletes the delivered streamed rows created before cutoff (see RunOnce), BatchSize rows read
// per statement, each in a transaction of its own with the bounds. It reads the stream's rows in (xid, id)
// order from the oldest, and stops at the end of what the cursor has passed or at a row created after
// cutoff: a transaction's rows get their xid at its first write, after its start (created_at), so the
// rows after that one were written after cutoff, but for those of a transaction that waited long before
// writing, which a later cleanup deletes. Rows that are kept (a ProcessAt ahead, an unfinished key) are
// read again by every cleanup, as the per-row cleanup's index reads them.
func (c *Cleaner) streamed(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	afterXID, afterID := "0", int64(0)
	for ctx.Err() == nil {
		var p store.StreamedPage
		err := store.InTx(ctx, c.db, c.cfg.Bounds, func(tx bun.Tx) error {
			var err error
			p, err = store.DeleteStreamed(ctx, tx, c.names, cutoff, c.cfg.BatchSize, afterXID, afterID)
			return err
		})
		if err != nil {
			return total, err
		}
		total += p.Deleted
		c.cfg.OnDeleted(p.Deleted)
		if p.Read < int64(c.cfg.BatchSize) || p.Young || !p.LastXID.Valid {
			break
		}
		afterXID, afterID = p.LastXID.String, p.LastID
	}
	return total, nil
}

// CancelledOnce deletes the settled cancelled rows cancelled more than Retention ago, BatchSize per
// statement, and returns how many it deleted.
func (c *Cleaner) CancelledOnce(ctx context.Context) (int64, error) {
	cutoff := c.cfg.Now().Add(-c.cfg.Retention)
	var total int64
	for ctx.Err() == nil {
		n, err := store.DeleteCancelled(ctx, c.db, c.names, cutoff, c.cfg.BatchSize)
		if err != nil {
			return total, err
		}
		total += n
		c.cfg.OnDeleted(n)
		if n < int64(c.cfg.BatchSize) {
			break
		}
	}
	if total > 0 {
		c.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: deleted cancelled rows past retention",
			slog.Int64("rows", total), slog.Duration("retention", c.cfg.Retention))
	}
	return total, nil
}
