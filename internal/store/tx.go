package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/uptrace/bun"
)

// readCommitted is the isolation of every transaction of the relay and its services, whatever the
// database's default_transaction_isolation: their statements are written for READ COMMITTED (SKIP LOCKED
// sees the rows committed since the statement began).
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// Begin begins a READ COMMITTED transaction on db and runs set in it: the set_config statement of the
// transaction's bounds (SET LOCAL, so that they hold behind a transaction pooler); empty sets nothing. The
// statement goes through the *sql.Tx, not through bun, so that the application's query hooks do not log it.
func Begin(ctx context.Context, db *bun.DB, set string) (bun.Tx, error) {
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return tx, err
	}
	if set != "" {
		if _, err := tx.Tx.ExecContext(ctx, set); err != nil {
			_ = tx.Rollback()
			return bun.Tx{}, fmt.Errorf("set the transaction's bounds: %w", err)
		}
	}
	return tx, nil
}

// InTx runs fn in a transaction of its own (Begin with set) and commits it.
func InTx(ctx context.Context, db *bun.DB, set string, fn func(tx bun.Tx) error) error {
	tx, err := Begin(ctx, db, set)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// errReadDone rolls back the transaction of ReadWithoutJIT once its read is done.
var errReadDone = errors.New("store: read done")

// ReadWithoutJIT runs read in a transaction of its own (a savepoint when db is a transaction) with jit off,
// and rolls it back: for the reads of bunbox status, the metrics and the reconciler that join each lane's
// cursor row to its rows (streamsql.PendingRows, streamsql.BoundingSnapshots). bunbox_stream holds a few
// rows that autovacuum seldom counts, and the planner takes a table it never analyzed for hundreds of
// rows: such a read's estimated cost then passed jit_above_cost, and compiling it took 30-40 ms where the
// read itself takes one or two. Nothing read is written, so the rollback loses nothing, and jit is set
// back for the caller's transaction.
func ReadWithoutJIT(ctx context.Context, db bun.IDB, read func(ctx context.Context, db bun.IDB) error) error {
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, "SELECT set_config('jit', 'off', true)"); err != nil {
			return err
		}
		if err := read(ctx, tx); err != nil {
			return err
		}
		return errReadDone
	})
	if errors.Is(err, errReadDone) {
		return nil
	}
	return err
}
