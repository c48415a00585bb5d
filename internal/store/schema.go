package store

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/tables"
)

// OutboxExists reports whether the outbox table of names exists.
func OutboxExists(ctx context.Context, db bun.IDB, names tables.Names) (bool, error) {
	var exists bool
	err := db.NewRaw(names.SQL("SELECT to_regclass('outbox_events') IS NOT NULL")).Scan(ctx, &exists)
	return exists, err
}

// CheckClaims runs the relay's claims (ClaimSQL, KeyedClaimSQL) for no row, and returns the first error:
// the outbox table of names lacks a column the relay reads.
func CheckClaims(ctx context.Context, db bun.IDB, names tables.Names) error {
	for _, query := range []string{ClaimSQL, KeyedClaimSQL} {
		rows, err := db.QueryContext(ctx, names.SQL(query), 0)
		if err != nil {
			return err
		}
		if err := rows.Close(); err != nil {
			return err
		}
	}
	return nil
}
