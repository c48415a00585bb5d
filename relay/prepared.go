package relay

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
// They are prepared only with Config.PreparedStatements (off by default): behind a transaction pooler that
// does not track prepared statements (PgBouncer before 1.21, or 1.21+ without max_prepared_statements) the
// drivers' per-connection names ("pgdriver-N", "pgx_N") collide on the shared server connections, and
// rounds fail with 42P05 or 26000. With the switch on, New prepares them (on a connection of its own,
// before any round holds one: a round that waited for a second connection could wait forever on a pool of
// one); each round's transaction then prepares them on its own connection the first time that connection
// runs them. Where statements cannot be prepared, or where the server loses or confuses them, the first
// failure turns them off and the statements run plain from then on; the round that failed is retried like
// any other.
type prepared struct {
	sql  string       // with PostgreSQL's placeholders, $1...
	stmt *sql.Stmt    // nil when preparing failed
	off  *atomic.Bool // shared by the relay's statements: a server that lost one lost them all
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

// statements are the relay's prepared statements.
type statements struct {
	off        atomic.Bool
	keyedClaim prepared // keyedClaimSizedSQL
	mark       prepared // markPublishedSQL
}

// newStatements prepares the statements on db when enabled (Config.PreparedStatements); else they stay off
// and run plain.
func newStatements(ctx context.Context, db *bun.DB, enabled bool, names tables.Names) *statements {
	s := &statements{}
	s.keyedClaim = prepared{sql: strings.Replace(names.SQL(keyedClaimSizedSQL), "LIMIT ?", "LIMIT $1", 1), off: &s.off}
	s.mark = prepared{sql: strings.Replace(names.SQL(markPublishedSQL), "?", "$1::bigint[]", 1), off: &s.off}
	if !enabled {
		s.off.Store(true)
		return s
	}
	s.keyedClaim.prepare(ctx, db)
	s.mark.prepare(ctx, db)
	return s
}

func (s *statements) close() error {
	if s == nil {
		return nil
	}
	return errors.Join(s.keyedClaim.close(), s.mark.close())
}

// queryKeyedClaim runs the keyed claim of n rows (keyedClaimSizedSQL) in tx, prepared where it can.
func (r *Relay) queryKeyedClaim(ctx context.Context, tx bun.Tx, n int) (*sql.Rows, error) {
	stmt := r.stmts.keyedClaim.in(ctx, tx)
	if stmt == nil {
		return tx.QueryContext(ctx, r.names.SQL(keyedClaimSizedSQL), n)
	}
	rows, err := stmt.QueryContext(ctx, n)
	r.stmts.keyedClaim.failed(err)
	return rows, err
}
