package listen

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
)

// runPgx is Run for a *bun.DB over pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib). It
// LISTENs on a connection of its own, outside the pool (as pgdriver's Listener does), dialed with the
// configuration of one of db's connections (db is the relay's database or URL's, see
// open), so TLS, credentials and runtime parameters are db's. A notification sent while it reconnects is lost: the poll interval covers that, and every
// (re)connect wakes the loop once.
func (l *Listener) runPgx(ctx context.Context, db *bun.DB) {
	failures := 0
	for ctx.Err() == nil {
		err := l.runPgxOnce(ctx, db, func() { failures = 0 })
		if ctx.Err() != nil {
			return
		}
		failures++
		if !l.backoff(ctx, failures, err) {
			return
		}
	}
}

// runPgxOnce connects, LISTENs and forwards notifications until ctx ends (nil) or the connection
// fails (the error). listening is called once the LISTEN is in effect.
func (l *Listener) runPgxOnce(ctx context.Context, db *bun.DB, listening func()) error {
	cfg, err := pgxConfig(ctx, db)
	if err != nil {
		return err
	}
	// A wait that times out must leave the connection usable: interrupt it with a read deadline (pgx's
	// default, made explicit in case the pool's configuration cancels by another means).
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect the listener: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// Exec waits for the server's reply: once it returns, the LISTEN is in effect.
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.cfg.Channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	listening()
	l.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: listening for notifications",
		slog.String("channel", l.cfg.Channel))
	// What was committed before the LISTEN took effect sent no notification we can see: look now.
	l.cfg.Wake()
	for {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.PollInterval)
		_, err := conn.WaitForNotification(wctx)
		timedOut := wctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			l.cfg.Wake()
		case ctx.Err() != nil:
			return nil
		case timedOut && pgconn.Timeout(err) && !conn.IsClosed():
			// Nothing within PollInterval: wait again on the same connection.
		default:
			return fmt.Errorf("wait for notifications: %w", err)
		}
	}
}

// pgxConfig returns the connection configuration of one of db's connections.
func pgxConfig(ctx context.Context, db *bun.DB) (*pgx.ConnConfig, error) {
	c, err := db.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var cfg *pgx.ConnConfig
	err = c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("the driver's connection is a %T, not pgx's *stdlib.Conn", dc)
		}
		cfg = sc.Conn().Config()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}
