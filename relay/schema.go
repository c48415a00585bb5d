package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// ErrReadOnly means the database the relay was given cannot be written: a standby in recovery, or
// default_transaction_read_only on for the role, the database or the connection. The relay marks rows in
// every round: give it the primary, writable.
var ErrReadOnly = errors.New("relay: the database is read-only")

// CheckSchema reports whether db has the table of the outbox at loc (the zero Location is the default
// outbox) at the schema version this relay knows, with every column the relay's claim reads: it runs the claim's query for no row, so it locks
// nothing and fails, naming what is missing, on a database that bunbox's migrations have not (fully)
// reached. A missing table gives an error wrapping ErrNoSchema, a database the relay cannot write (see
// checkWritable) one wrapping ErrReadOnly, an invalid schema or prefix one wrapping ErrInvalidConfig. It is
// what a readiness probe asks (the standalone relay's /readyz does).
func CheckSchema(ctx context.Context, db bun.IDB, loc model.Location) error {
	if err := validateTables(loc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return checkSchemaOf(ctx, db, mustNames(loc))
}

func checkSchemaOf(ctx context.Context, db bun.IDB, names tables.Names) error {
	if err := checkSchema(ctx, db, names); err != nil {
		return err
	}
	if err := checkWritable(ctx, db); err != nil {
		return err
	}
	if err := store.CheckClaims(ctx, db, names); err != nil {
		return fmt.Errorf("relay: the outbox table does not have the relay's columns (apply the migrations): %w", err)
	}
	return nil
}

// checkWritable returns an error wrapping ErrReadOnly, which says why, when a transaction on db would be
// read-only: the server is a standby (pg_is_in_recovery), or default_transaction_read_only is on.
func checkWritable(ctx context.Context, db bun.IDB) error {
	var readOnly string
	var recovery bool
	if err := db.NewRaw("SELECT current_setting('transaction_read_only'), pg_is_in_recovery()").
		Scan(ctx, &readOnly, &recovery); err != nil {
		return fmt.Errorf("relay: PostgreSQL: %w", err)
	}
	switch {
	case recovery:
		return fmt.Errorf("%w: the server is a standby in recovery (pg_is_in_recovery); give the relay the primary", ErrReadOnly)
	case readOnly == "on":
		return fmt.Errorf("%w: transaction_read_only is on (default_transaction_read_only, set on the role, the "+
			"database or the connection); the relay writes in every round: give it a writable connection", ErrReadOnly)
	}
	return nil
}
