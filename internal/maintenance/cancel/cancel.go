// Package cancel takes the tasks of cancelled events (bunx.Outbox.Cancel) back out of asynq and records
// what it found in each row.
package cancel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/internal/taskmap"
)

// Inspector is what the canceller needs from asynq: *asynq.Inspector implements it. GetTaskInfo must
// return an error wrapping asynq.ErrTaskNotFound or asynq.ErrQueueNotFound for a task Redis does not have.
type Inspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

// Defaults of the zero fields of a Config.
const (
	checkIntervalDefault = 100 * time.Millisecond
	pollIntervalDefault  = 500 * time.Millisecond
	cleanupEveryDefault  = time.Minute
)

// pageSize is how many cancelled rows one pass locks at a time.
const pageSize = 100

// Config tunes a Canceller.
type Config struct {
	// Inspector looks the tasks up and deletes them. Defaults to nil: cancelled rows wait, and Run says
	// once that this relay cannot take their tasks out.
	Inspector Inspector
	// CheckInterval is the pause between two looks for cancelled rows. Defaults to 100ms.
	CheckInterval time.Duration
	// PollInterval bounds the backoff while only running tasks are found, and is the pause without an
	// Inspector. Defaults to 500ms.
	PollInterval time.Duration
	// Routes are the relay's: an event with listeners is a task per listener. Defaults to none.
	Routes fanout.Routes
	// Backoff is the wait after the n-th failed pass in a row. Defaults to CheckInterval.
	Backoff func(n int) time.Duration
	// Cursor reports whether the stream's cursor table exists (see store.LockCancelled). Defaults to no.
	Cursor func(ctx context.Context) bool
	// Cleanup, when set, is called at most every CleanupEvery, before a look: the deletion of settled
	// cancelled rows past their retention. Defaults to nil.
	Cleanup func(ctx context.Context)
	// CleanupEvery is the least time between two calls of Cleanup. Defaults to 1m.
	CleanupEvery time.Duration
	// Wake, when set, is called when a pass released ordering keys. Defaults to nil.
	Wake func()
	// Logger receives the canceller's logs. Defaults to one that discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.CheckInterval = cmp.Or(c.CheckInterval, checkIntervalDefault)
	c.PollInterval = cmp.Or(c.PollInterval, pollIntervalDefault)
	c.CleanupEvery = cmp.Or(c.CleanupEvery, cleanupEveryDefault)
	if c.Backoff == nil {
		c.Backoff = func(int) time.Duration { return c.CheckInterval }
	}
	if c.Cursor == nil {
		c.Cursor = func(context.Context) bool { return false }
	}
	if c.Wake == nil {
		c.Wake = func() {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.CheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("CheckInterval must be positive, got %s", c.CheckInterval))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("PollInterval must be positive, got %s", c.PollInterval))
	}
	if c.CleanupEvery <= 0 {
		errs = append(errs, fmt.Errorf("CleanupEvery must be positive, got %s", c.CleanupEvery))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cancel: invalid config: %w", err)
	}
	return nil
}

// Canceller settles the cancelled rows of one outbox.
type Canceller struct {
	db    *bun.DB
	names tables.Names
	cfg   Config
}

// New returns a Canceller of the outbox names on db, or an error naming the field of cfg that cannot work.
func New(db *bun.DB, names tables.Names, cfg Config) (*Canceller, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Canceller{db: db, names: names, cfg: cfg}, nil
}

// Run takes the tasks of cancelled events back out of asynq (RunOnce) every CheckInterval, backing off
// while it finds only tasks that are running, and calls Cleanup every CleanupEvery, until ctx is done;
// it returns nil. A pass that released ordering keys calls Wake.
func (c *Canceller) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	lastCleanup := time.Time{}
	failures, idle := 0, 0
	warned := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if c.cfg.Cleanup != nil && time.Since(lastCleanup) >= c.cfg.CleanupEvery {
			lastCleanup = time.Now()
			c.cfg.Cleanup(ctx)
		}
		wait := c.cfg.CheckInterval
		if due, err := store.CancelDue(ctx, c.db, c.names); err != nil || !due {
			timer.Reset(wait)
			continue
		}
		if c.cfg.Inspector == nil {
			if !warned {
				warned = true
				c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: cancelled events may still wait in asynq, but this relay "+
					"cannot take them out: give relay.New the Redis options or Config.Inspector")
			}
			timer.Reset(c.cfg.PollInterval)
			continue
		}
		res, err := c.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			failures++
			wait = c.cfg.Backoff(failures)
			c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: taking cancelled events out of asynq failed, backing off",
				slog.Int("attempt", failures), slog.Duration("delay", wait), slog.Any("err", err))
		case res.Settled == 0:
			failures = 0
			idle++ // only running tasks: look less often
			wait = min(c.cfg.CheckInterval<<min(idle, 6), max(c.cfg.PollInterval, c.cfg.CheckInterval))
		default:
			failures, idle = 0, 0
		}
		if res.Keys > 0 {
			c.cfg.Wake()
		}
		timer.Reset(wait)
	}
}

// Result describes one pass of RunOnce.
type Result struct {
	Checked int // cancelled rows looked at
	Settled int // of them, done with: nothing left to take back
	Removed int // tasks deleted from asynq
	Keys    int // ordering keys released
}

// RunOnce makes one pass over the cancelled rows whose tasks may still be in asynq, a page at a time. It
// needs an Inspector.
func (c *Canceller) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	if c.cfg.Inspector == nil {
		return res, errors.New("cancel: no Inspector")
	}
	var after int64
	for ctx.Err() == nil {
		n, last, err := c.page(ctx, after, &res)
		if err != nil || n < pageSize {
			return res, err
		}
		after = last
	}
	return res, nil
}

// page locks a page of the cancelled rows not yet settled, takes their tasks out of asynq and records the
// outcome. The lock keeps the key tracker and other relays off the rows meanwhile.
func (c *Canceller) page(ctx context.Context, after int64, res *Result) (n int, last int64, err error) {
	bg := context.WithoutCancel(ctx) // what was deleted from asynq is recorded
	tx, err := c.db.BeginTx(bg, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	page, err := store.LockCancelled(ctx, tx, c.names, after, pageSize, c.cfg.Cursor(ctx))
	if err != nil || len(page) == 0 {
		return 0, 0, err
	}
	res.Checked += len(page)
	ids := make([]int64, len(page))
	results := make([]string, len(page))
	settled := make([]bool, len(page))
	removed := make([]int, len(page))
	for i := range page {
		ids[i] = page[i].ID
		results[i], removed[i], err = c.takeBack(&page[i])
		if err != nil {
			return 0, 0, err // the tasks deleted so far are looked up again by the next pass: then missing
		}
		settled[i] = results[i] != store.CancelRunning
	}
	if err := store.RecordCancels(bg, tx, c.names, ids, results, settled); err != nil {
		return 0, 0, fmt.Errorf("record cancels: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	for i := range page {
		row := &page[i]
		res.Removed += removed[i]
		if settled[i] {
			res.Settled++
			if row.Key != "" {
				res.Keys++
			}
		}
		level := slog.LevelInfo
		if results[i] == store.CancelRan || results[i] == store.CancelRunning {
			if row.Result == results[i] {
				continue // said already
			}
			level = slog.LevelWarn
		}
		c.cfg.Logger.LogAttrs(bg, level, "bunbox relay: cancelled event: "+results[i],
			slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()),
			slog.String("task_type", row.Name), slog.String("queue", row.Queue), slog.Int("tasks_removed", removed[i]))
	}
	return len(page), page[len(page)-1].ID, nil
}

// takeBack deletes from asynq the tasks of a cancelled row that have not run and says what it found: the
// row's outcome and how many tasks it deleted. A running task outweighs one that ran, which outweighs
// one deleted, which outweighs one gone. An error that leaves a task's state unknown aborts the pass.
func (c *Canceller) takeBack(row *store.CancelRow) (result string, removed int, err error) {
	if !row.Published {
		return store.CancelGone, 0, nil // put back in line after the cancel, because its task was missing
	}
	var running, ran, gone int
	for _, id := range taskmap.IDs(c.cfg.Routes, row.EventID, row.Name) {
		info, err := c.cfg.Inspector.GetTaskInfo(row.Queue, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			gone++
			continue
		case err != nil:
			return "", removed, fmt.Errorf("look up task %s in queue %q: %w", id, row.Queue, err)
		}
		switch info.State {
		case asynq.TaskStateActive:
			running++
			continue
		case asynq.TaskStateCompleted:
			ran++
			continue
		}
		err = c.cfg.Inspector.DeleteTask(row.Queue, id)
		switch {
		case err == nil:
			removed++
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			gone++
		case strings.Contains(err.Error(), "active state"): // a worker took it meanwhile
			running++
		default:
			return "", removed, fmt.Errorf("delete task %s from queue %q: %w", id, row.Queue, err)
		}
	}
	switch {
	case running > 0:
		return store.CancelRunning, removed, nil
	case ran > 0:
		return store.CancelRan, removed, nil
	case removed > 0:
		return store.CancelRemoved, removed, nil
	}
	return store.CancelGone, removed, nil
}
