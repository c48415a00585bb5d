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
//		Tx     *bunx.Transactor
//		Events bunx.Dispatcher
//	}
//
// Its bun implementation is *Outbox, which writes into the transaction in ctx; a test can pass a fake.
type Dispatcher interface {
	Dispatch(ctx context.Context, events ...*model.Event) error
}

var _ Dispatcher = (*Outbox)(nil)

// Dispatch records events in the bun.Tx that a Transactor (or ContextWithTx) put into ctx, so they commit
// with the caller's transaction. Without a transaction in ctx it is a plain insert with the Outbox's
// database: the events are written at once, and atomicity with the caller's other writes does not hold.
func (o *Outbox) Dispatch(ctx context.Context, events ...*model.Event) error {
	if o == nil {
		return errors.New("bunx: Dispatch on a nil Outbox: make it with bunx.New")
	}
	return o.Record(ctx, TxOrDB(ctx, o.db), events...)
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

// TxOrDB returns the transaction that ctx carries, or db when it carries none. Repositories use it so that
// their queries join the caller's transaction:
//
//	_, err := bunx.TxOrDB(ctx, r.db).NewInsert().Model(order).Exec(ctx)
func TxOrDB(ctx context.Context, db bun.IDB) bun.IDB {
	if tx, ok := TxFromContext(ctx); ok {
		return tx
	}
	return db
}

// Transactor runs functions in a transaction that it puts into their context (the seed's
// WithinTransaction), so that Dispatch, TxOrDB and the model hooks of queries made with TxOrDB all join it.
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
