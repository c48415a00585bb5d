package relay

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/uptrace/bun"
)

// prepared is one of the relay's hottest statements, prepared once per connection. PostgreSQL plans a
// plain statement every time it runs, and for these it spent about as long planning as running them, or
// ten times longer: the keyed claim when no key is open, as in a backlog of unkeyed rows (pgbench,
// simple protocol against prepared: 0.58 against 0.05 ms a claim). A prepared statement is planned once
// per connection and then runs on PostgreSQL's generic plan when that costs no more.
//
// Where statements cannot be prepared (a pooler in transaction mode, say) the first failure turns it off
// and the statement runs plain from then on; the round that failed is retried like any other.
type prepared struct {
	sql  string // with PostgreSQL's placeholders, $1...
	once sync.Once
	stmt *sql.Stmt // nil when preparing failed
	off  atomic.Bool
}

// in returns the statement for tx, preparing it on db the first time; nil means run the plain one.
func (p *prepared) in(ctx context.Context, db *bun.DB, tx bun.Tx) *sql.Stmt {
	if p.off.Load() {
		return nil
	}
	p.once.Do(func() {
		stmt, err := db.DB.PrepareContext(ctx, p.sql)
		if err != nil {
			p.off.Store(true)
			return
		}
		p.stmt = stmt
	})
	if p.off.Load() {
		return nil
	}
	return tx.Tx.StmtContext(ctx, p.stmt)
}

// failed turns the statement off after an error that says the server lost it.
func (p *prepared) failed(err error) {
	if err != nil && strings.Contains(err.Error(), "prepared statement") {
		p.off.Store(true) // e.g. `prepared statement "pgdriver-3" does not exist`, behind a pooler
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
	keyedClaim prepared // keyedClaimSizedSQL
	mark       prepared // markPublishedSQL
}

func newStatements() *statements {
	return &statements{
		keyedClaim: prepared{sql: strings.Replace(keyedClaimSizedSQL, "LIMIT ?", "LIMIT $1", 1)},
		mark:       prepared{sql: strings.Replace(markPublishedSQL, "?", "$1::bigint[]", 1)},
	}
}

func (s *statements) close() error {
	return errors.Join(s.keyedClaim.close(), s.mark.close())
}

// queryKeyedClaim runs the keyed claim of n rows (keyedClaimSizedSQL) in tx, prepared where it can.
func (r *Relay) queryKeyedClaim(ctx context.Context, tx bun.Tx, n int) (*sql.Rows, error) {
	stmt := r.stmts.keyedClaim.in(ctx, r.db, tx)
	if stmt == nil {
		return tx.QueryContext(ctx, keyedClaimSizedSQL, n)
	}
	rows, err := stmt.QueryContext(ctx, n)
	r.stmts.keyedClaim.failed(err)
	return rows, err
}
