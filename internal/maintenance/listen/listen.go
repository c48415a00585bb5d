// Package listen wakes an idle relay within milliseconds of a commit by LISTENing on the outbox's channel,
// which the trigger of relay.EnableNotifyTrigger notifies after every INSERT.
//
// LISTEN needs a server session of its own. Behind a pooler in transaction mode the LISTEN lands on a
// pooled server connection, and the notifications sent to it later go to whichever client that
// connection serves next: one arrived in the middle of another client's commit (`pgdriver: Exec:
// unexpected message 'A'`). So the listener listens only on a connection it can tell is direct: at
// start-up PostgreSQL gives each connection its backend's process id (BackendKeyData), and
// pg_backend_pid() on that connection returns the same number; a pooler hands its clients a process id of
// its own making. Where the two differ, or the driver's connection does not show the id, it does not
// listen: the relay polls (PollInterval, and MinPollInterval while rows come), and it says why once at
// start.
package listen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/connect"
)

// checkInterval is how often an unconfirmed listener notifies itself again.
const checkInterval = 100 * time.Millisecond

// pollIntervalDefault is Config.PollInterval's default.
const pollIntervalDefault = 500 * time.Millisecond

// Config tunes a Listener.
type Config struct {
	// Channel is the channel to LISTEN on. Required.
	Channel string
	// URL, when set, is the direct connection to listen through (the relay's Config.ListenURL); otherwise
	// the relay's own database, when its connections are direct. Defaults to "".
	URL string
	// PollInterval is the relay's: how long one wait for a notification lasts. Defaults to 500ms.
	PollInterval time.Duration
	// Wake is called for every notification, and whenever the listener (re)starts listening. Required.
	Wake func()
	// Backoff is the wait after the n-th failure in a row. Defaults to PollInterval.
	Backoff func(n int) time.Duration
	// Logger receives the listener's logs. Defaults to one that discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.PollInterval = cmp.Or(c.PollInterval, pollIntervalDefault)
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
	if c.Channel == "" {
		errs = append(errs, errors.New("Channel is required"))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("PollInterval must be positive, got %s", c.PollInterval))
	}
	if c.Wake == nil {
		errs = append(errs, errors.New("Wake is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("listen: invalid config: %w", err)
	}
	return nil
}

// Listener forwards the notifications of one outbox's channel as wake-ups.
type Listener struct {
	db  *bun.DB // the relay's database
	cfg Config
}

// New returns a Listener for the relay's database db, or an error naming the field of cfg that cannot work.
func New(db *bun.DB, cfg Config) (*Listener, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Listener{db: db, cfg: cfg}, nil
}

// Run forwards notifications on the channel to Wake as hints, until ctx ends, and returns nil. A
// notification sent while the listener reconnects is lost: the poll interval covers that, and a reconnect
// wakes the loop. It listens only through a direct connection (URL, or the relay's database when its
// connections are direct), never through a pooler.
func (l *Listener) Run(ctx context.Context) error {
	db, release, ok := l.open(ctx)
	if !ok {
		return nil
	}
	defer release()
	if _, ok := db.Driver().(*stdlib.Driver); ok {
		l.runPgx(ctx, db)
		return nil
	}
	l.runPgdriver(ctx, db)
	return nil
}

// runPgdriver is Run on bun's pgdriver.
func (l *Listener) runPgdriver(ctx context.Context, db *bun.DB) {
	ln := pgdriver.NewListener(db)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer func() {
		if stop() {
			_ = ln.Close()
		}
	}()
	channel := l.cfg.Channel
	failures := 0
	listening, confirmed := false, false
	for ctx.Err() == nil {
		var err error
		if !listening {
			if err = ln.Listen(ctx, channel); err == nil {
				listening, confirmed = true, false
				// What was committed before LISTEN took effect sent no notification we can see: look
				// now. Then notify ourselves: receiving it proves the LISTEN is active.
				l.cfg.Wake()
				if err = pgdriver.Notify(ctx, db, channel, "listen-check"); err == nil {
					failures = 0
					continue
				}
			}
		} else {
			timeout := l.cfg.PollInterval
			if !confirmed {
				timeout = min(timeout, checkInterval)
			}
			_, _, err = ln.ReceiveTimeout(ctx, timeout)
			if err == nil {
				if !confirmed {
					confirmed = true
					l.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: listening for notifications",
						slog.String("channel", channel))
				}
				l.cfg.Wake()
				continue
			}
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				if confirmed {
					continue
				}
				// The check may have raced the LISTEN (pgdriver does not wait for its reply): again.
				if err = pgdriver.Notify(ctx, db, channel, "listen-check"); err == nil {
					continue
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		failures++
		listening = false
		if !l.backoff(ctx, failures, err) {
			return
		}
	}
}

// backoff logs a failure of the listener (at Debug) and waits Backoff for its failures in a row; it
// reports false when ctx ended first.
func (l *Listener) backoff(ctx context.Context, failures int, err error) bool {
	delay := l.cfg.Backoff(failures)
	l.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: listener failed, retrying",
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

// open returns the database the listener LISTENs through, URL or the relay's own, and a func that
// releases it; false means do not listen (the reason is logged) or ctx ended.
func (l *Listener) open(ctx context.Context) (*bun.DB, func(), bool) {
	if !knownDriver(l.db) {
		l.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: the driver is neither pgdriver nor pgx; polling without notifications",
			slog.String("driver", fmt.Sprintf("%T", l.db.Driver())))
		return nil, nil, false
	}
	db, release := l.db, func() {}
	source := "the relay's database"
	if l.cfg.URL != "" {
		source = "Config.ListenURL"
		opts := connect.Options{Driver: connect.DriverPgdriver, MaxOpenConns: 2, MaxIdleConns: 1}
		if _, ok := l.db.Driver().(*stdlib.Driver); ok {
			opts.Driver = connect.DriverPgx
		}
		for failures := 0; ; {
			opened, err := connect.Postgres(ctx, l.cfg.URL, opts)
			if err == nil {
				db, release = opened, func() { _ = opened.Close() }
				break
			}
			if ctx.Err() != nil {
				return nil, nil, false
			}
			if failures == 0 {
				l.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: cannot open Config.ListenURL for notifications; polling meanwhile",
					slog.Any("err", err))
			}
			failures++
			if !l.backoff(ctx, failures, err) {
				return nil, nil, false
			}
		}
	}
	for failures := 0; ; {
		reason, err := l.NotDirect(ctx, db)
		if err == nil && reason == "" {
			return db, release, true
		}
		if err == nil {
			level := slog.LevelInfo
			if l.cfg.URL != "" {
				level = slog.LevelWarn // the operator meant it to be direct
			}
			l.cfg.Logger.LogAttrs(ctx, level, "bunbox relay: not listening for notifications: "+reason+
				"; LISTEN needs a direct connection (set Config.ListenURL, OUTBOX_LISTEN_URL); polling instead",
				slog.String("source", source), slog.Duration("poll_interval", l.cfg.PollInterval))
			release()
			return nil, nil, false
		}
		if ctx.Err() != nil {
			release()
			return nil, nil, false
		}
		failures++
		if !l.backoff(ctx, failures, err) {
			release()
			return nil, nil, false
		}
	}
}

// knownDriver reports whether db's driver is one the listener can listen with.
func knownDriver(db *bun.DB) bool {
	switch db.Driver().(type) {
	case pgdriver.Driver, *stdlib.Driver:
		return true
	}
	return false
}

// NotDirect returns why a connection of db is not (or cannot be told to be) a server session of its own,
// or "" when it is one. When db is not the relay's database (URL) it also checks that both are one
// database.
func (l *Listener) NotDirect(ctx context.Context, db *bun.DB) (string, error) {
	c, err := db.DB.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var given int64
	known, kind := false, ""
	if err := c.Raw(func(dc any) error {
		given, known = startupPID(dc)
		kind = fmt.Sprintf("%T", dc)
		return nil
	}); err != nil {
		return "", err
	}
	var pid int64
	var name string
	if err := c.QueryRowContext(ctx, "SELECT pg_backend_pid(), current_database()").Scan(&pid, &name); err != nil {
		return "", err
	}
	switch {
	case !known:
		return fmt.Sprintf("cannot tell whether the connections go through a pooler (a %s does not show "+
			"its backend's process id)", kind), nil
	case pid != given:
		return "the connections go through a pooler (the server's pg_backend_pid() is not the process id the " +
			"connection was given at start-up)", nil
	}
	if db != l.db {
		var want string
		if err := l.db.NewRaw("SELECT current_database()").Scan(ctx, &want); err != nil {
			return "", err
		}
		if want != name {
			return fmt.Sprintf("Config.ListenURL names database %q, the relay's database is %q", name, want), nil
		}
	}
	return "", nil
}

// startupPID returns the backend process id a driver connection was given at start-up, and false when the
// driver does not show it. pgdriver keeps it in an unexported field (processID), read here; where bun's
// driver changes that, the listener stops listening rather than guess (TestListenOnlyWhenDirect fails so
// that the change is seen).
func startupPID(dc any) (int64, bool) {
	switch c := dc.(type) {
	case *stdlib.Conn:
		return int64(c.Conn().PgConn().PID()), true
	case *pgdriver.Conn:
		v := reflect.ValueOf(c).Elem()
		f := v.FieldByName("processID")
		if !f.IsValid() || f.Kind() != reflect.Int32 {
			return 0, false
		}
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Int(), true
	}
	return 0, false
}
