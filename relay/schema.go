package relay

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// CheckSchema reports whether db has the outbox table with every column the relay's claim reads: it runs
// the claim's query for no row, so it locks nothing and fails, naming what is missing, on a database
// that bunbox's migrations have not (fully) reached. A missing table gives an error wrapping ErrNoSchema.
// It is what a readiness probe asks (the standalone relay's /readyz does).
func CheckSchema(ctx context.Context, db bun.IDB) error {
	if err := checkSchema(ctx, db); err != nil {
		return err
	}
	for _, query := range []string{claimSQL, keyedClaimSQL} {
		rows, err := db.QueryContext(ctx, query, 0)
		if err != nil {
			return fmt.Errorf("bunbox: the outbox table does not have the relay's columns (apply the migrations): %w", err)
		}
		if err := rows.Close(); err != nil {
			return err
		}
	}
	return nil
}
