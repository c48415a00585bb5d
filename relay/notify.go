package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// EnableNotifyTrigger installs, on the outbox table that the outbox at loc serves (the zero
// Location is the default outbox), a statement-level trigger that sends a
// NOTIFY after every INSERT, on the channel of that outbox (notifyChannel, with ":" + the schema and the
// prefix when they are set), on which only its relays listen, so an idle relay wakes within milliseconds of
// a commit. It is idempotent. PostgreSQL delivers the notification at commit, and only for a commit. Its
// cost: a NOTIFY takes a database-wide lock at commit, which serializes committing writers that notify;
// see docs/performance.md before enabling it on a hot write path. An invalid schema or prefix gives an
// error wrapping ErrInvalidConfig that names the field.
func EnableNotifyTrigger(ctx context.Context, db bun.IDB, loc model.Location) error {
	if err := validateTables(loc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return enableNotifyTrigger(ctx, db, mustNames(loc))
}

func enableNotifyTrigger(ctx context.Context, db bun.IDB, names tables.Names) error {
	fn := names.Qualify("bunbox_outbox_notify")
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for _, q := range []string{
			`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('` + names.Channel(notifyChannel) + `', ''); RETURN NULL; END $$`,
			names.SQL(`DROP TRIGGER IF EXISTS bunbox_outbox_notify ON outbox_events`),
			names.SQL(`CREATE TRIGGER bunbox_outbox_notify AFTER INSERT ON outbox_events
FOR EACH STATEMENT EXECUTE FUNCTION `) + fn + `()`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// DisableNotifyTrigger removes the trigger of EnableNotifyTrigger from the outbox at loc; its relays fall back to polling.
func DisableNotifyTrigger(ctx context.Context, db bun.IDB, loc model.Location) error {
	if err := validateTables(loc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	names := mustNames(loc)
	_, err := db.ExecContext(ctx, names.SQL(`DROP TRIGGER IF EXISTS bunbox_outbox_notify ON outbox_events`))
	return err
}

// listenCheckInterval is how often an unconfirmed listener notifies itself again.
const listenCheckInterval = 100 * time.Millisecond

// listen forwards notifications on notifyChannel to wake as hints, until ctx ends. A notification sent
// while the listener reconnects is lost: the poll interval covers that, and a reconnect wakes the loop.
// It listens only through a direct connection (listenDB: Config.ListenURL, or the relay's database when
// its connections are direct), never through a pooler.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	db, release, ok := r.listenDB(ctx)
	if !ok {
		return
	}
	defer release()
	if _, ok := db.Driver().(*stdlib.Driver); ok {
		r.listenPgx(ctx, db, wake)
		return
	}
	ln := pgdriver.NewListener(db)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer func() {
		if stop() {
			_ = ln.Close()
		}
	}()
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	failures := 0
	listening, confirmed := false, false
	for ctx.Err() == nil {
		var err error
		if !listening {
			if err = ln.Listen(ctx, r.names.Channel(notifyChannel)); err == nil {
				listening, confirmed = true, false
				// What was committed before LISTEN took effect sent no notification we can see: look
				// now. Then notify ourselves: receiving it proves the LISTEN is active.
				signal()
				if err = pgdriver.Notify(ctx, db, r.names.Channel(notifyChannel), "listen-check"); err == nil {
					failures = 0
					continue
				}
			}
		} else {
			timeout := r.cfg.PollInterval
			if !confirmed {
				timeout = min(timeout, listenCheckInterval)
			}
			_, _, err = ln.ReceiveTimeout(ctx, timeout)
			if err == nil {
				if !confirmed {
					confirmed = true
					r.log.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: listening for notifications",
						slog.String("channel", r.names.Channel(notifyChannel)))
				}
				signal()
				continue
			}
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				if confirmed {
					continue
				}
				// The check may have raced the LISTEN (pgdriver does not wait for its reply): again.
				if err = pgdriver.Notify(ctx, db, r.names.Channel(notifyChannel), "listen-check"); err == nil {
					continue
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		failures++
		listening = false
		if !r.listenerBackoff(ctx, failures, err) {
			return
		}
	}
}

// listenerBackoff logs a listener's failure and waits the round backoff for its failures in a row, for
// either driver's listener; it reports false when ctx ended first.
func (r *Relay) listenerBackoff(ctx context.Context, failures int, err error) bool {
	return r.helperBackoff(ctx, "bunbox relay: listener failed, retrying", failures, err)
}

// helperBackoff logs msg (at Debug) for a failure of one of the relay's helper goroutines, the listener
// or the wake-up, and waits the round backoff for its failures in a row; it reports false when ctx ended
// first.
func (r *Relay) helperBackoff(ctx context.Context, msg string, failures int, err error) bool {
	delay := r.cfg.roundBackoff(failures)
	r.log.LogAttrs(ctx, slog.LevelDebug, msg,
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
