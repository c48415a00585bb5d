package bunx

import (
	"context"
	"database/sql"
	"errors"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// Dispatcher is what service code takes to emit events without knowing the outbox, as in:
//
//	type OrderService struct {
//		Tx     bunx.TxRunner // *bunx.Transactor
//		Events bunx.Dispatcher
//		Orders *OrderRepo // writes with bunx.TxOrDB(ctx, db): see TxOrDB
//	}
//
// Its bun implementation is *Outbox, which writes into the transaction in ctx; a test can pass a fake.
type Dispatcher interface {
	Dispatch(ctx context.Context, events ...*model.Event) error
}

var _ Dispatcher = (*Outbox)(nil)

// ErrNoTransaction is returned by Dispatch on an Outbox made WithStrictDispatch when ctx carries no
// transaction.
var ErrNoTransaction = errors.New("bunx: Dispatch outside a transaction (WithStrictDispatch): call it inside " +
	"Transactor.WithinTransaction, or put the bun.Tx into ctx with bunx.ContextWithTx")

// WithStrictDispatch makes Dispatch without a transaction in ctx an error (ErrNoTransaction) instead of a
// plain insert: the events of service code that was meant to run inside WithinTransaction but does not are
// then refused rather than written apart from the business change. Record is not affected. Defaults to
// off: Dispatch outside a transaction writes the events at once.
func WithStrictDispatch() Option {
	return func(o *Outbox) { o.reg.strict = true }
}

// Dispatch records events in the bun.Tx that a Transactor (or ContextWithTx) put into ctx, so they commit
// with the caller's transaction. Without a transaction in ctx it is a plain insert with the Outbox's
// database: the events are written at once, and atomicity with the caller's other writes does not hold
// (with WithStrictDispatch it returns ErrNoTransaction instead).
//
// Dispatch joins the transaction; the business writes must join it too. A repository that writes with its
// own *bun.DB inside WithinTransaction runs outside it: its change commits at once, and stays when the
// transaction (and so the event) rolls back. Repositories write with TxOrDB(ctx, r.db).
func (o *Outbox) Dispatch(ctx context.Context, events ...*model.Event) error {
	if o == nil || o.reg == nil {
		return errors.New("bunx: Dispatch on a nil Outbox: make it with bunx.New")
	}
	tx, ok := TxFromContext(ctx)
	if !ok {
		if o.reg.strict {
			return ErrNoTransaction
		}
		return o.Record(ctx, o.db, events...)
	}
	return o.Record(ctx, tx, events...)
}

type txKey struct{}

// ContextWithTx returns a context that carries tx, for Dispatch and TxOrDB to join.
func ContextWithTx(ctx context.Context, tx bun.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFromContext returns the bun.Tx that ctx carries, if any.
func TxFromContext(ctx context.Context) (bun.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(bun.Tx)
	return tx, ok
}

// TxOrDB returns the transaction that ctx carries, or db when it carries none. It is how a repository's
// writes join the transaction of Transactor.WithinTransaction, as the seed's pg.DB does by itself:
//
//	type OrderRepo struct{ db *bun.DB }
//
//	func (r *OrderRepo) Insert(ctx context.Context, o *Order) error {
//		_, err := bunx.TxOrDB(ctx, r.db).NewInsert().Model(o).Exec(ctx) // joins the tx in ctx, if any
//		return err
//	}
//
// A query built on r.db itself (r.db.NewInsert()) never joins: bun's queries are bound to their
// connection when they are built, and ctx cannot move them. Inside WithinTransaction such a write commits
// at once, and stays when the transaction, with the events Dispatch wrote in it, rolls back.
func TxOrDB(ctx context.Context, db bun.IDB) bun.IDB {
	if tx, ok := TxFromContext(ctx); ok {
		return tx
	}
	return db
}

// TxRunner is what service code takes to run a unit of work in a transaction: *Transactor in production, a
// fake in a unit test (one that calls fn(ctx), or one that puts a bun.Tx of the test's into ctx with
// ContextWithTx).
type TxRunner interface {
	WithinTransaction(ctx context.Context, fn func(ctx context.Context) error) error
}

var _ TxRunner = (*Transactor)(nil)

// Transactor runs functions in a transaction that it puts into their context (the seed's
// WithinTransaction), so that Dispatch, TxOrDB and the model hooks of queries made with TxOrDB all join it.
//
// Only what reads the transaction from ctx joins it: Dispatch, and queries built on TxOrDB(ctx, db). A
// query built on a *bun.DB runs outside the transaction, commits at once, and is not undone when fn fails:
// write with TxOrDB in every repository that service code calls inside WithinTransaction.
type Transactor struct {
	db   *bun.DB
	opts *sql.TxOptions
}

// TransactorOption configures a Transactor.
type TransactorOption func(*Transactor)

// WithTxOptions sets the isolation level and read-only flag of the Transactor's transactions.
// Defaults to nil: the database's defaults.
func WithTxOptions(opts *sql.TxOptions) TransactorOption {
	return func(t *Transactor) { t.opts = opts }
}

// NewTransactor returns a Transactor that begins its transactions on db.
func NewTransactor(db *bun.DB, opts ...TransactorOption) *Transactor {
	t := &Transactor{db: db}
	for _, opt := range opts {
		if opt != nil {
			opt(t)
		}
	}
	return t
}

// WithinTransaction runs fn in db.RunInTx with the transaction in fn's context. It commits when fn returns
// nil and rolls back when fn returns an error or panics. Called inside another WithinTransaction, it runs
// fn in a savepoint of the outer transaction, so a failing inner call rolls back only its own writes.
func (t *Transactor) WithinTransaction(ctx context.Context, fn func(ctx context.Context) error) error {
	if t == nil || t.db == nil {
		return errors.New("bunx: WithinTransaction on a Transactor without a database")
	}
	run := func(ctx context.Context, tx bun.Tx) error { return fn(ContextWithTx(ctx, tx)) }
	if outer, ok := TxFromContext(ctx); ok {
		return outer.RunInTx(ctx, t.opts, run)
	}
	return t.db.RunInTx(ctx, t.opts, run)
}
