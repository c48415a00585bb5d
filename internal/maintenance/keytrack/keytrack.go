// Package keytrack is the relay's part of per-key ordering after the claim: it looks up the tasks of the
// keyed rows in flight (published, not completed, not dead) and records what asynq did with them.
//
//   - all of the row's tasks completed: completed_at is set, which makes the key's next row its head; the
//     relay is woken to claim it.
//   - a task archived (asynq gave up after its retries, or the handler returned SkipRetry): the row is
//     marked dead with asynq's last error, and blocks its key until `bunbox dead retry` (admin.RetryDead),
//     after which the relay deletes the archived task and enqueues a fresh one (Tracker.RerunArchived).
//   - a task missing from Redis: Redis lost it (a failover or a restart without persistence) or, when no
//     relay looked for longer than TaskRetention, asynq dropped it after it completed. Either way the row
//     is put back in line and enqueued again. The key stays held meanwhile, so a repeated delivery can
//     never overtake the events that follow; the price is that an event may run twice (the bunx Inbox
//     absorbs that), never that one is lost.
//   - pending, scheduled, active, retry: the row waits.
//
// Every relay runs one; they share the rows with FOR UPDATE SKIP LOCKED.
package keytrack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// Inspector is what the tracker needs from asynq: *asynq.Inspector implements it. GetTaskInfo must return
// an error wrapping asynq.ErrTaskNotFound or asynq.ErrQueueNotFound for a task Redis does not have.
type Inspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

var _ Inspector = (*asynq.Inspector)(nil)

// Enqueuer enqueues a task: *asynq.Client implements it.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, t *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// Defaults of the zero fields of a Config.
const (
	checkIntervalDefault = 10 * time.Millisecond
	pollIntervalDefault  = 500 * time.Millisecond
	concurrencyDefault   = 16
)

// keyCheckBackoff is how many times CheckInterval the tracker waits at most while keyed rows are in
// flight and nothing changes; keyCheckPatience is how many passes without a change it makes at
// CheckInterval before it starts backing off.
const (
	keyCheckBackoff  = 10
	keyCheckPatience = 10
)

// pageSize is how many keyed rows in flight one tracker transaction locks and looks up.
const pageSize = 500

// MissingLastError is the last_error of a keyed row whose task the tracker found missing.
const MissingLastError = "bunbox relay: the task of this keyed event was missing from Redis (data loss?); enqueued again"

// Dead describes a keyed row the tracker marked dead: asynq archived its task.
type Dead struct {
	ID      int64
	EventID uuid.UUID
	Name    string
	Err     string
}

// Config tunes a Tracker.
type Config struct {
	// Inspector looks the tasks up and deletes them. Required.
	Inspector Inspector
	// Redis, when set, reads the states of a page's tasks in one pipeline; only archived ones are then
	// looked up through Inspector, for their error. Defaults to nil: every task through Inspector.
	Redis redis.UniversalClient
	// RedisOpt, when set, lets the tracker register again a queue Redis forgot (see LookUp). Defaults to
	// nil: a task of such a queue is missing.
	RedisOpt asynq.RedisConnOpt
	// CheckInterval is the pause between two passes while keyed rows are in flight. Defaults to 10ms.
	CheckInterval time.Duration
	// PollInterval is the pause between two passes while none are. Defaults to 500ms.
	PollInterval time.Duration
	// Concurrency bounds the look-ups through Inspector running at once, at least 1. Defaults to 16.
	Concurrency int
	// Routes are the relay's: an event with listeners is a task per listener. Defaults to none.
	Routes fanout.Routes
	// Bounds is the set_config statement of each transaction's server-side bounds (store.Begin). Defaults
	// to none.
	Bounds string
	// Backoff is the wait after the n-th failed pass in a row. Defaults to CheckInterval.
	Backoff func(n int) time.Duration
	// Logger receives the tracker's logs. Defaults to one that discards them.
	Logger *slog.Logger
	// Wake, when set, is called when a pass released keys (completed or requeued rows). Defaults to nil.
	Wake func()
	// OnCompleted and OnDead, when set, are called with the rows a pass completed, and with each row it
	// marked dead. Default to nil.
	OnCompleted func(n int)
	OnDead      func(ctx context.Context, d Dead)
}

func (c Config) withDefaults() Config {
	c.CheckInterval = cmp.Or(c.CheckInterval, checkIntervalDefault)
	c.PollInterval = cmp.Or(c.PollInterval, pollIntervalDefault)
	c.Concurrency = cmp.Or(c.Concurrency, concurrencyDefault)
	if c.Backoff == nil {
		c.Backoff = func(int) time.Duration { return c.CheckInterval }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Wake == nil {
		c.Wake = func() {}
	}
	if c.OnCompleted == nil {
		c.OnCompleted = func(int) {}
	}
	if c.OnDead == nil {
		c.OnDead = func(context.Context, Dead) {}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Inspector == nil {
		errs = append(errs, errors.New("Inspector is required"))
	}
	if c.CheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("CheckInterval must be positive, got %s", c.CheckInterval))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("PollInterval must be positive, got %s", c.PollInterval))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("Concurrency must be at least 1, got %d", c.Concurrency))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("keytrack: invalid config: %w", err)
	}
	return nil
}

// Tracker tracks the keyed rows in flight of one outbox. A nil *Tracker is a relay without one: its
// Published and RerunArchived do nothing.
type Tracker struct {
	db    *bun.DB
	names tables.Names
	cfg   Config
	kick  chan struct{} // keyed rows were published: look soon

	mu         sync.Mutex           // held while a queue is registered
	registered map[string]time.Time // queues registered again, and when
}

// New returns a Tracker of the outbox names on db, or an error naming the field of cfg that cannot work.
func New(db *bun.DB, names tables.Names, cfg Config) (*Tracker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Tracker{db: db, names: names, cfg: cfg, kick: make(chan struct{}, 1), registered: map[string]time.Time{}}, nil
}

// Published tells the tracker that a round committed; it looks at once if keyed rows were among them.
func (t *Tracker) Published(events []model.Event) {
	if t == nil {
		return
	}
	for i := range events {
		if events[i].OrderingKey != "" {
			select {
			case t.kick <- struct{}{}:
			default:
			}
			return
		}
	}
}

// Run runs passes until ctx is done, and returns nil: every CheckInterval while keyed rows are in flight,
// backing off (doubling up to keyCheckBackoff times that) after keyCheckPatience passes in a row saw no
// change, and every PollInterval when none are in flight. A round that published keyed rows kicks it
// (Published) and resets the backoff; a pass that released keys calls Wake.
func (t *Tracker) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures, quiet := 0, 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-t.kick:
			quiet = 0
		}
		res, err := t.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if res.Completed > 0 || res.Requeued > 0 {
			t.cfg.Wake()
		}
		var wait time.Duration
		switch {
		case err != nil:
			failures++
			wait = t.cfg.Backoff(failures)
			t.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: checking keyed events failed, backing off",
				slog.Int("attempt", failures), slog.Duration("delay", wait), slog.Any("err", err))
		case res.InFlight == 0:
			failures, quiet = 0, 0
			wait = t.cfg.PollInterval
		case res.Completed+res.Dead+res.Requeued > 0:
			failures, quiet = 0, 0
			wait = t.cfg.CheckInterval
		default:
			failures = 0
			quiet++
			wait = t.cfg.CheckInterval
			if over := quiet - keyCheckPatience; over > 0 {
				wait = min(t.cfg.CheckInterval<<min(over, 8), keyCheckBackoff*t.cfg.CheckInterval)
			}
		}
		timer.Reset(wait)
	}
}

// Result describes one tracker pass.
type Result struct {
	InFlight  int // keyed rows in flight that the pass looked at
	Completed int // of them, completed: their keys moved on
	Dead      int // of them, archived by asynq: their keys are blocked
	Requeued  int // of them, missing from Redis: put back in line
}

// RunOnce makes one pass over the keyed rows in flight, a page at a time in id order.
func (t *Tracker) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	var after int64
	for ctx.Err() == nil {
		n, last, err := t.page(ctx, after, &res)
		if err != nil || n < pageSize {
			return res, err
		}
		after = last
	}
	return res, nil
}

// outcome is what the tracker found for a row.
type outcome int

const (
	waiting outcome = iota
	completed
	archived
	missing
)

func (t *Tracker) page(ctx context.Context, after int64, res *Result) (n int, last int64, err error) {
	bg := context.WithoutCancel(ctx) // what was looked up is written
	tx, err := store.Begin(bg, t.db, t.cfg.Bounds)
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	inflight, err := store.LockKeyedInFlight(ctx, tx, t.names, after, pageSize)
	if err != nil || len(inflight) == 0 {
		return 0, 0, err
	}
	res.InFlight += len(inflight)
	outcomes, lastErrs, err := t.lookUpRows(ctx, inflight)
	if err != nil {
		return 0, 0, err
	}
	var done, gone, dead []int64
	var deadErrs []string
	for i, o := range outcomes {
		switch o {
		case completed:
			done = append(done, inflight[i].ID)
		case missing:
			gone = append(gone, inflight[i].ID)
		case archived:
			dead = append(dead, inflight[i].ID)
			deadErrs = append(deadErrs, truncate(lastErrs[i], 2000))
		}
	}
	if len(done)+len(gone)+len(dead) == 0 {
		return len(inflight), inflight[len(inflight)-1].ID, nil
	}
	if len(done) > 0 {
		if err := store.CompleteKeyed(bg, tx, t.names, done); err != nil {
			return 0, 0, fmt.Errorf("mark completed: %w", err)
		}
	}
	if len(gone) > 0 {
		if err := store.RequeueKeyed(bg, tx, t.names, gone, MissingLastError); err != nil {
			return 0, 0, fmt.Errorf("requeue missing: %w", err)
		}
	}
	if len(dead) > 0 {
		if err := store.KillKeyed(bg, tx, t.names, dead, deadErrs); err != nil {
			return 0, 0, fmt.Errorf("mark archived dead: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	res.Completed += len(done)
	res.Requeued += len(gone)
	res.Dead += len(dead)
	t.cfg.OnCompleted(len(done))
	for i, o := range outcomes {
		row := &inflight[i]
		switch o {
		case missing:
			t.cfg.Logger.LogAttrs(bg, slog.LevelWarn, "bunbox relay: the task of a keyed event is missing from Redis; enqueued again",
				slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()), slog.String("ordering_key", row.Key))
		case archived:
			t.cfg.Logger.LogAttrs(bg, slog.LevelError, "bunbox relay: asynq archived the task of a keyed event; its key is blocked until it is retried",
				slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()),
				slog.String("task_type", row.Name), slog.String("ordering_key", row.Key), slog.String("err", lastErrs[i]))
			t.cfg.OnDead(bg, Dead{ID: row.ID, EventID: row.EventID, Name: row.Name, Err: lastErrs[i]})
		}
	}
	return len(inflight), inflight[len(inflight)-1].ID, nil
}

// truncate cuts s to n bytes for last_error: PostgreSQL text takes neither NUL nor invalid UTF-8 (a cut
// may split a rune).
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "")
}

// WarnWithoutTracker logs, as a relay without a Tracker starts, that keyed rows wait because it cannot
// track them: pending ones, and those waiting in the stream, which hands every keyed row to the per-row
// path.
func WarnWithoutTracker(ctx context.Context, db bun.IDB, names tables.Names, log *slog.Logger) {
	if keyed, err := store.KeyedWaiting(ctx, db, names); err == nil && keyed {
		log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: keyed events are waiting, but this relay relays none: "+
			"give relay.New the Redis options or Config.Inspector")
	}
}
