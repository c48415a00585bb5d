package relay

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"unsafe"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/connect"
)

// LISTEN needs a server session of its own. Behind a pooler in transaction mode the LISTEN lands on a
// pooled server connection, and the notifications sent to it later go to whichever client that connection
// serves next: one arrived in the middle of another client's commit (`pgdriver: Exec: unexpected message
// 'A'`). So the relay listens only on a connection it can tell is direct: at start-up PostgreSQL gives each
// connection its backend's process id (BackendKeyData), and pg_backend_pid() on that connection returns the
// same number; a pooler hands its clients a process id of its own making. Where the two differ, or the
// driver's connection does not show the id, the relay does not listen: it polls (PollInterval, and
// MinPollInterval while rows come), and says why once at start.

// listenDB returns the database the relay LISTENs through, Config.ListenURL or the relay's own, and a func
// that releases it; false means do not listen (the reason is logged) or ctx ended.
func (r *Relay) listenDB(ctx context.Context) (*bun.DB, func(), bool) {
	if !knownDriver(r.db) {
		r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: the driver is neither pgdriver nor pgx; polling without notifications",
			slog.String("driver", fmt.Sprintf("%T", r.db.Driver())))
		return nil, nil, false
	}
	db, release := r.db, func() {}
	source := "the relay's database"
	if r.cfg.ListenURL != "" {
		source = "Config.ListenURL"
		opts := connect.Options{Driver: connect.DriverPgdriver, MaxOpenConns: 2, MaxIdleConns: 1}
		if _, ok := r.db.Driver().(*stdlib.Driver); ok {
			opts.Driver = connect.DriverPgx
		}
		for failures := 0; ; {
			opened, err := connect.Postgres(ctx, r.cfg.ListenURL, opts)
			if err == nil {
				db, release = opened, func() { _ = opened.Close() }
				break
			}
			if ctx.Err() != nil {
				return nil, nil, false
			}
			if failures == 0 {
				r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: cannot open Config.ListenURL for notifications; polling meanwhile",
					slog.Any("err", err))
			}
			failures++
			if !r.listenerBackoff(ctx, failures, err) {
				return nil, nil, false
			}
		}
	}
	for failures := 0; ; {
		reason, err := r.notDirect(ctx, db)
		if err == nil && reason == "" {
			return db, release, true
		}
		if err == nil {
			level := slog.LevelInfo
			if r.cfg.ListenURL != "" {
				level = slog.LevelWarn // the operator meant it to be direct
			}
			r.log.LogAttrs(ctx, level, "bunbox relay: not listening for notifications: "+reason+
				"; LISTEN needs a direct connection (set Config.ListenURL, OUTBOX_LISTEN_URL); polling instead",
				slog.String("source", source), slog.Duration("poll_interval", r.cfg.PollInterval))
			release()
			return nil, nil, false
		}
		if ctx.Err() != nil {
			release()
			return nil, nil, false
		}
		failures++
		if !r.listenerBackoff(ctx, failures, err) {
			release()
			return nil, nil, false
		}
	}
}

// knownDriver reports whether db's driver is one the relay can listen with.
func knownDriver(db *bun.DB) bool {
	switch db.Driver().(type) {
	case pgdriver.Driver, *stdlib.Driver:
		return true
	}
	return false
}

// notDirect returns why a connection of db is not (or cannot be told to be) a server session of its own,
// or "" when it is one. With Config.ListenURL it also checks that db is the relay's database.
func (r *Relay) notDirect(ctx context.Context, db *bun.DB) (string, error) {
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
	if db != r.db {
		var want string
		if err := r.db.NewRaw("SELECT current_database()").Scan(ctx, &want); err != nil {
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
// driver changes that, the relay stops listening rather than guess (TestListenOnlyWhenDirect fails so that
// the change is seen).
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
