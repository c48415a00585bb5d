package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/internal/tables"
)

// prepared is one of the relay's hottest statements, prepared once per connection. PostgreSQL plans a
// plain statement every time it runs, and for these it spent about as long planning as running them, or
// ten times longer: the keyed claim when no key is open, as in a backlog of unkeyed rows (pgbench, simple
// protocol against prepared: 0.58 against 0.05 ms a claim). A prepared statement is planned once per
// connection and then runs on PostgreSQL's generic plan when that costs no more.
//
// They are prepared only with the relay's Config.PreparedStatements (off by default): behind a transaction
// pooler that does not track prepared statements (PgBouncer before 1.21, or 1.21+ without
// max_prepared_statements) the drivers' per-connection names ("pgdriver-N", "pgx_N") collide on the shared
// server connections, and rounds fail with 42P05 or 26000. With the switch on, the relay's New prepares
// them (on a connection of its own, before any round holds one: a round that waited for a second
// connection could wait forever on a pool of one); each round's transaction then prepares them on its own
// connection the first time that connection runs them. Where statements cannot be prepared, or where the
// server loses or confuses them, the first failure turns them off and the statements run plain from then
// on; the round that failed is retried like any other.
type prepared struct {
	plain string       // the statement as it runs plain, with bun's placeholders
	sql   string       // with PostgreSQL's placeholders, $1...
	stmt  *sql.Stmt    // nil when preparing failed
	off   *atomic.Bool // shared by the relay's statements: a server that lost one lost them all
}

// prepare prepares the statement on db, or turns it off.
func (p *prepared) prepare(ctx context.Context, db *bun.DB) {
	stmt, err := db.DB.PrepareContext(ctx, p.sql)
	if err != nil {
		p.off.Store(true)
		return
	}
	p.stmt = stmt
}

// in returns the statement for tx; nil means run the plain one.
func (p *prepared) in(ctx context.Context, tx bun.Tx) *sql.Stmt {
	if p.stmt == nil || p.off.Load() {
		return nil
	}
	return tx.StmtContext(ctx, p.stmt)
}

// failed turns the statement off after an error that says the server lost it, or has another statement
// under its name.
func (p *prepared) failed(err error) {
	if pgerr.Is(err, pgerr.InvalidSQLStatementName) || pgerr.Is(err, pgerr.DuplicatePreparedStatement) {
		p.off.Store(true) // `prepared statement "pgdriver-3" does not exist` (or "already exists"), behind a pooler
	}
}

// close releases the prepared statement.
func (p *prepared) close() error {
	if p.stmt == nil {
		return nil
	}
	return p.stmt.Close()
}

// Prepared are the relay's hottest statements (the keyed claim and the mark of delivered rows), prepared
// where it can.
type Prepared struct {
	off        atomic.Bool
	keyedClaim prepared // keyedClaimSizedSQL
	mark       prepared // markPublishedSQL
}

// NewPrepared prepares the statements on db when enabled (the relay's Config.PreparedStatements); else
// they stay off and run plain.
func NewPrepared(ctx context.Context, db *bun.DB, enabled bool, names tables.Names) *Prepared {
	s := &Prepared{}
	keyed, mark := names.SQL(keyedClaimSizedSQL), names.SQL(markPublishedSQL)
	s.keyedClaim = prepared{plain: keyed, sql: strings.Replace(keyed, "LIMIT ?", "LIMIT $1", 1), off: &s.off}
	s.mark = prepared{plain: mark, sql: strings.Replace(mark, "?", "$1::bigint[]", 1), off: &s.off}
	if !enabled {
		s.off.Store(true)
		return s
	}
	s.keyedClaim.prepare(ctx, db)
	s.mark.prepare(ctx, db)
	return s
}

// Off reports whether the statements run plain: not enabled, or turned off after a failure.
func (s *Prepared) Off() bool { return s.off.Load() }

// Made reports whether the keyed claim and the mark were prepared.
func (s *Prepared) Made() (keyedClaim, mark bool) {
	return s.keyedClaim.stmt != nil, s.mark.stmt != nil
}

// Close releases the prepared statements.
func (s *Prepared) Close() error {
	if s == nil {
		return nil
	}
	return errors.Join(s.keyedClaim.close(), s.mark.close())
}
