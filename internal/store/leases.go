package store

import (
	"context"
	"errors"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/internal/tables"
)

// The leases' statements: a named row of bunbox_leases is taken, renewed and given up.

// ErrNoLeaseTable means that the table bunbox_leases does not exist: the migration
// 20261202000001_bunbox_leases has not been applied.
var ErrNoLeaseTable = errors.New("relay: table bunbox_leases does not exist: apply the migrations with `bunbox migrate up` or migrate.Up")

// takeLeaseSQL takes the lease when it is free (no row, or expired) or already ours, and renews it; it
// returns a row only then.
const takeLeaseSQL = `INSERT INTO bunbox_leases AS l (name, holder, expires_at)
VALUES (?0, ?1, clock_timestamp() + ?2 * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE l.expires_at < clock_timestamp() OR l.holder = EXCLUDED.holder
RETURNING l.holder`

// TakeLease takes or renews the lease name for holder, for ttl from the database's clock, in one
// autocommitted statement. It reports whether holder has it now, or an error wrapping ErrNoLeaseTable
// when the table is missing.
func TakeLease(ctx context.Context, db bun.IDB, names tables.Names, name, holder string, ttl time.Duration) (bool, error) {
	var holders []string
	err := db.NewRaw(names.SQL(takeLeaseSQL), name, holder, ttl.Milliseconds()).Scan(ctx, &holders)
	if pgerr.Is(err, pgerr.UndefinedTable) {
		return false, ErrNoLeaseTable
	}
	return len(holders) > 0, err
}

// ReleaseLease gives the lease name up if holder has it. A missing table is no error.
func ReleaseLease(ctx context.Context, db bun.IDB, names tables.Names, name, holder string) error {
	_, err := db.NewRaw(names.SQL("DELETE FROM bunbox_leases WHERE name = ? AND holder = ?"), name, holder).Exec(ctx)
	if err != nil && !pgerr.Is(err, pgerr.UndefinedTable) {
		return err
	}
	return nil
}
