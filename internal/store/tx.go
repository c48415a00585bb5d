package store

import (
	"context"
	"database/sql"
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
