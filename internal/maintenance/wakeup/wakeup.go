// Package wakeup wakes an idle relay when a row was inserted: every Interval it reads the last value of
// the sequence behind outbox_events.id (pg_sequence_last_value: one autocommitted statement of a few
// microseconds of server CPU, no lock on the table, no session state, so it works through a transaction
// pooler), and signals as soon as it moved. It costs the write path nothing: nextval already writes the
// value at INSERT.
//
// nextval runs at INSERT, before the commit: a value can move for a transaction that has not committed
// yet, or that rolls back. The round it wakes then finds nothing, so the watcher wakes the relay again,
// after 1, 2, 4, 8, ... intervals, until a round claims a row at or past that value or retries rounds
// went by; after that PollInterval (the safety net) takes over. A relay whose rows another replica
// claimed stops after those few rounds in the same way.
//
// What the wake-up cannot see: a sequence whose CACHE is over 1 (a session hands out values it took
// before, without moving last_value) and a role without SELECT or USAGE on the sequence. In both cases
// the watcher logs a warning at start and the relay waits up to PollInterval after a quiet spell.
package wakeup

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
)

// retries is how many more times one move of the sequence wakes the relay when the rounds it woke found
// nothing at or past the moved value (the inserting transaction had not committed yet).
const retries = 7

// insufficientPrivilege is SQLSTATE 42501.
const insufficientPrivilege = "42501"

// Defaults of the zero fields of a Config.
const (
	intervalDefault     = 5 * time.Millisecond
	pollIntervalDefault = 500 * time.Millisecond
	hotWindowDefault    = time.Second
)

// Config tunes a Watcher.
type Config struct {
	// Interval is how often the watcher reads the sequence. Defaults to 5ms.
	Interval time.Duration
	// PollInterval is the relay's: after it, a move no round claimed is left to the poll. Defaults to 500ms.
	PollInterval time.Duration
	// MinPollInterval and HotWindow are the relay's: while it polls at MinPollInterval, within HotWindow
	// of a claim that returned rows, the watcher does not read (see State.HotFor). Default to 0 (never
	// hot) and 1s.
	MinPollInterval time.Duration
	HotWindow       time.Duration
	// State is shared with the relay's rounds. Required.
	State *State
	// Wake is called when rows may wait. Required.
	Wake func()
	// Backoff is the wait after the n-th failed read in a row. Defaults to PollInterval.
	Backoff func(n int) time.Duration
	// Logger receives the watcher's logs. Defaults to one that discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Interval = cmp.Or(c.Interval, intervalDefault)
	c.PollInterval = cmp.Or(c.PollInterval, pollIntervalDefault)
	c.HotWindow = cmp.Or(c.HotWindow, hotWindowDefault)
	if c.MinPollInterval == 0 {
		c.MinPollInterval = c.Interval + 1 // never hot
	}
	if c.Backoff == nil {
		c.Backoff = func(int) time.Duration { return c.PollInterval }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("Interval must be positive, got %s", c.Interval))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("PollInterval must be positive, got %s", c.PollInterval))
	}
	if c.State == nil {
		errs = append(errs, errors.New("State is required"))
	}
	if c.Wake == nil {
		errs = append(errs, errors.New("Wake is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("wakeup: invalid config: %w", err)
	}
	return nil
}

// Watcher watches the sequence behind the outbox's ids.
type Watcher struct {
	db    *bun.DB
	names tables.Names
	cfg   Config
	role  string // the relay's role, quoted, for the GRANT a warning names
}

// New returns a Watcher of the outbox names on db, or an error naming the field of cfg that cannot work.
func New(db *bun.DB, names tables.Names, cfg Config) (*Watcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Watcher{db: db, names: names, cfg: cfg}, nil
}

// Sequence returns the sequence to watch, or false after logging why there is none (or when ctx ended).
func (w *Watcher) Sequence(ctx context.Context) (string, bool) {
	for failures := 0; ; {
		s, err := store.IDSequence(ctx, w.db, w.names)
		if err == nil {
			w.role = s.Role
			return w.usable(ctx, s.Name.String, s.Allowed.Bool, s.Cache)
		}
		if ctx.Err() != nil {
			return "", false
		}
		failures++
		if !w.backoff(ctx, failures, err) {
			return "", false
		}
	}
}

// backoff logs a failed read (at Debug) and waits Backoff for its failures in a row; it reports false
// when ctx ended first.
func (w *Watcher) backoff(ctx context.Context, failures int, err error) bool {
	delay := w.cfg.Backoff(failures)
	w.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: wake-up read failed, retrying",
		slog.Int("attempt", failures), slog.Duration("delay", delay), slog.Any("err", err))
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// usable says, with a warning, why the sequence seq cannot drive the wake-up, or returns it.
func (w *Watcher) usable(ctx context.Context, seq string, allowed bool, cache sql.NullInt64) (string, bool) {
	why := ""
	switch {
	case seq == "":
		why = "outbox_events.id has no sequence (it is not an identity or serial column)"
	case !allowed:
		why = "the relay's role may not read the sequence " + seq + ": GRANT USAGE ON SEQUENCE " + seq + " TO " + w.role
	case cache.Int64 > 1:
		why = "the sequence " + seq + " has CACHE over 1, so its last value does not move with every insert: ALTER SEQUENCE " + seq + " CACHE 1"
	}
	if why == "" {
		return seq, true
	}
	w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: no wake-up after a quiet spell: "+why+
		"; the first event after a quiet spell waits up to PollInterval (set WakeInterval to -1 to silence this)",
		slog.Duration("poll_interval", w.cfg.PollInterval))
	return "", false
}

// Run calls Wake when the sequence behind outbox_events.id moves, until ctx ends, and returns nil. It
// returns at once when there is no sequence it can watch (Sequence says why).
func (w *Watcher) Run(ctx context.Context) error {
	seq, ok := w.Sequence(ctx)
	if !ok {
		return nil
	}
	read := store.LastValueSQL(seq)
	timer := time.NewTimer(w.cfg.Interval)
	defer timer.Stop()
	st := w.cfg.State
	var last sql.NullInt64
	known := false
	var target int64      // the moved value no round has claimed up to yet; 0: none
	var movedAt time.Time // when it moved
	tries, skip := 0, 0
	for failures := 0; ; {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		st.Wakes.Add(1)
		if hot := st.HotFor(w.cfg.MinPollInterval, w.cfg.Interval, w.cfg.HotWindow, time.Now()); hot > 0 {
			timer.Reset(max(hot, w.cfg.Interval)) // the loop polls at MinPollInterval until then
			continue
		}
		timer.Reset(w.cfg.Interval)
		v, err := store.LastValue(ctx, w.db.DB, read)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgerr.Is(err, insufficientPrivilege) {
				w.usable(ctx, seq, false, sql.NullInt64{})
				return nil
			}
			failures++
			if !w.backoff(ctx, failures, err) { // an outage: the rounds back off too
				return nil
			}
			continue
		}
		failures = 0
		st.Reads.Add(1)
		switch {
		case !known: // a round now takes what came before this first read
			last, known = v, true
			w.cfg.Wake()
		case v != last:
			last = v
			target, movedAt, tries, skip = v.Int64, time.Now(), 0, 0
			w.cfg.Wake()
		case target == 0:
		case st.Claimed.Load() >= target || tries >= retries || time.Since(movedAt) > w.cfg.PollInterval:
			target = 0 // claimed, or left to the poll
		case skip > 0:
			skip--
		default:
			tries++
			skip = 1<<tries - 1 // wake again after 1, 2, 4, 8, ... intervals
			w.cfg.Wake()
		}
	}
}
