package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/internal/tables"
)

// errNoLeaseTable means that the table bunbox_leases does not exist: the migration
// 20261202000001_bunbox_leases has not been applied.
var errNoLeaseTable = errors.New("relay: table bunbox_leases does not exist: apply the migrations with `bunbox migrate up` or migrate.Up")

// lease is one named row of bunbox_leases: at most one holder at a time, for ttl after it last took or
// renewed it. Each take or renewal is one autocommitted statement, never a session lock, so that a
// transaction pooler (PgBouncer in transaction mode) cannot strand it on a server connection: a holder
// that dies (SIGKILL, a partition) simply stops renewing, and the row is free once expires_at has passed.
// The expiry is the database's clock; the holder counts its term on its own clock from before the
// statement was sent, so it believes it holds the lease for no longer than the database does.
type lease struct {
	db     bun.IDB
	name   string
	holder string
	ttl    time.Duration
	now    func() time.Time
	names  tables.Names // the schema of the leases table (Config.Location)
}

func newLease(db bun.IDB, name string, ttl time.Duration) *lease {
	return &lease{db: db, name: name, holder: leaseHolderID(), ttl: ttl, now: time.Now}
}

// leaseHolderID names this process for an operator reading bunbox_leases: host, pid and a random part
// (one process may run several relays).
func leaseHolderID() string {
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + uuid.NewString()[:8]
}

// leaseTakeSQL takes the lease when it is free (no row, or expired) or already ours, and renews it; it
// returns a row only then.
const leaseTakeSQL = `INSERT INTO bunbox_leases AS l (name, holder, expires_at)
VALUES (?0, ?1, clock_timestamp() + ?2 * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE l.expires_at < clock_timestamp() OR l.holder = EXCLUDED.holder
RETURNING l.holder`

// take takes or renews the lease. It returns until, the local time up to which the lease is surely held
// (zero when it is not), or an error wrapping errNoLeaseTable when the table is missing.
func (l *lease) take(ctx context.Context) (until time.Time, err error) {
	start := l.now()
	var holders []string
	err = l.db.NewRaw(l.names.SQL(leaseTakeSQL), l.name, l.holder, l.ttl.Milliseconds()).Scan(ctx, &holders)
	switch {
	case pgerr.Is(err, pgerr.UndefinedTable):
		return time.Time{}, errNoLeaseTable
	case err != nil:
		return time.Time{}, fmt.Errorf("relay: lease %q: %w", l.name, err)
	case len(holders) == 0:
		return time.Time{}, nil
	}
	return start.Add(l.ttl), nil
}

// release gives the lease up if this holder has it, so that another takes it at once rather than after
// the expiry.
func (l *lease) release(ctx context.Context) error {
	_, err := l.db.NewRaw(l.names.SQL("DELETE FROM bunbox_leases WHERE name = ? AND holder = ?"), l.name, l.holder).Exec(ctx)
	if err != nil && !pgerr.Is(err, pgerr.UndefinedTable) {
		return fmt.Errorf("relay: release lease %q: %w", l.name, err)
	}
	return nil
}
