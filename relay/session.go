package relay

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
)

// Defaults of the server-side bounds of the relay's transactions (see Config.IdleInTransactionTimeout).
const (
	idleInTransactionTimeoutDefault = 15 * time.Second
	statementTimeoutDefault         = 30 * time.Second
	lockTimeoutDefault              = 10 * time.Second
)

// sessionBounds are the server-side limits a relay, reconciler or cleaner transaction sets on itself when it
// begins, so that the server ends a transaction whose client went silent (a network partition, a hung
// process) and releases its locks, instead of holding them for as long as TCP takes to notice (hours).
//
// They are set per transaction (SET LOCAL, as one set_config round trip), never per session, so that they
// hold behind a transaction pooler (PgBouncer in transaction mode), which hands the server connection to
// another client at commit and would carry a session setting over to it.
type sessionBounds struct {
	sql       string        // the set_config statement; empty: nothing to set
	keepAlive time.Duration // how often a long round shows the server it is alive; 0: never
}

// bounds are the sessionBounds of c: idle_in_transaction_session_timeout (and tcp_user_timeout, the same
// bound for a reply the server cannot deliver), statement_timeout and lock_timeout, each left to the
// server's setting when its field is negative.
func (c Config) bounds() sessionBounds {
	return newSessionBounds(c.IdleInTransactionTimeout, c.StatementTimeout, c.LockTimeout)
}

// defaultBounds are the bounds of a zero Config, for the components that have no fields of their own.
func defaultBounds() sessionBounds {
	return newSessionBounds(idleInTransactionTimeoutDefault, statementTimeoutDefault, lockTimeoutDefault)
}

// newSessionBounds builds the set_config statement of the given bounds; a bound <= 0 is not set.
//
// tcp_user_timeout bounds how long the server keeps sending to a peer that acknowledges nothing: a partition
// that falls while the server writes a large result leaves the session neither idle nor able to check its
// statement_timeout. It exists from PostgreSQL 12 on; the statement sets only the parameters the server knows
// (current_setting(name, true) is NULL for an unknown one), so an older server keeps its own behaviour there.
// The values are whole milliseconds, written into the statement so that it has no parameters: one round trip
// in the simple protocol, and one text for a driver's statement cache.
func newSessionBounds(idle, statement, lock time.Duration) sessionBounds {
	var pairs []string
	add := func(name string, d time.Duration) {
		if d > 0 {
			pairs = append(pairs, fmt.Sprintf("('%s', '%d')", name, max(d.Milliseconds(), 1)))
		}
	}
	add("idle_in_transaction_session_timeout", idle)
	add("tcp_user_timeout", idle)
	add("statement_timeout", statement)
	add("lock_timeout", lock)
	var b sessionBounds
	if len(pairs) > 0 {
		b.sql = "SELECT set_config(name, setting, true) FROM (VALUES " + strings.Join(pairs, ", ") +
			") AS bounds(name, setting) WHERE current_setting(name, true) IS NOT NULL"
	}
	if idle > 0 {
		b.keepAlive = idle / 3
	}
	return b
}

// setLocalSQL is a statement that sets each (name, setting) row of pairs (SQL, e.g. "('jit', 'off')") for
// the current transaction only.
func setLocalSQL(pairs string) string {
	return "SELECT set_config(name, setting, true) FROM (VALUES " + pairs + ") AS s(name, setting)"
}

// readCommitted is the isolation of every relay, reconciler and cleaner transaction, whatever the
// database's default_transaction_isolation: their claims and marks are written for READ COMMITTED (SKIP
// LOCKED sees the rows committed since the claim began), and under SERIALIZABLE concurrent rounds fail with
// 40001.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// beginBounded begins a READ COMMITTED transaction on db and sets b in it. The statement goes through the
// *sql.Tx, not through bun, so that the application's query hooks do not log it with every round.
func beginBounded(ctx context.Context, db *bun.DB, b sessionBounds) (bun.Tx, error) {
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return tx, err
	}
	if b.sql != "" {
		if _, err := tx.Tx.ExecContext(ctx, b.sql); err != nil {
			_ = tx.Rollback()
			return bun.Tx{}, fmt.Errorf("set the transaction's bounds: %w", err)
		}
	}
	return tx, nil
}

// begin begins a relay round's transaction: READ COMMITTED, with Config's bounds.
func (r *Relay) begin(ctx context.Context) (bun.Tx, error) {
	return beginBounded(ctx, r.db, r.cfg.bounds())
}

// keepAlive runs a trivial statement on tx every b.keepAlive until the returned stop is called, so that a
// round that waits on Redis (enqueues bounded by EnqueueTimeout, Concurrency at a time) is not taken by the
// server for a partitioned one and ended by idle_in_transaction_session_timeout. A partitioned relay's
// statements never arrive, so the bound still ends its transaction. Errors are ignored: the round meets
// them in its next statement.
func keepAlive(ctx context.Context, tx bun.Tx, b sessionBounds) (stop func()) {
	if b.keepAlive <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(b.keepAlive)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// database/sql serializes this with the marks on the same connection.
				_, _ = tx.Tx.ExecContext(ctx, "SELECT 1")
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// validateBound checks a bound field: negative (none) or at least least.
func validateBound(name string, d, least time.Duration) error {
	if d < 0 || d >= least {
		return nil
	}
	return fmt.Errorf("%s must be at least %s, or negative to leave the server's setting, got %s", name, least, d)
}
