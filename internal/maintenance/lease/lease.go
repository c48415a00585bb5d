// Package lease is a named row of bunbox_leases held by one process at a time, and what its holder knows
// of it (Leadership): a service that must run once per outbox (the relay's reconciler) runs its passes
// only while it holds one.
package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
)

// Lease is one named row of bunbox_leases: at most one holder at a time, for TTL after it last took or
// renewed it. Each take or renewal is one autocommitted statement, never a session lock, so that a
// transaction pooler (PgBouncer in transaction mode) cannot strand it on a server connection: a holder
// that dies (SIGKILL, a partition) simply stops renewing, and the row is free once expires_at has passed.
// The expiry is the database's clock; the holder counts its term on its own clock from before the
// statement was sent, so it believes it holds the lease for no longer than the database does.
type Lease struct {
	db     bun.IDB
	names  tables.Names // the leases table's outbox
	name   string
	holder string
	ttl    time.Duration
	now    func() time.Time
}

// New returns the lease name, held for ttl, in the leases table of the outbox names on db.
func New(db bun.IDB, names tables.Names, name string, ttl time.Duration) *Lease {
	return &Lease{db: db, names: names, name: name, holder: holderID(), ttl: ttl, now: time.Now}
}

// holderID names this process for an operator reading bunbox_leases: host, pid and a random part (one
// process may run several relays).
func holderID() string {
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + uuid.NewString()[:8]
}

// Holder is the lease's holder id of this process.
func (l *Lease) Holder() string { return l.holder }

// TTL is how long a take or a renewal holds the lease.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Take takes or renews the lease. It returns until, the local time up to which the lease is surely held
// (zero when it is not), or an error wrapping store.ErrNoLeaseTable when the table is missing.
func (l *Lease) Take(ctx context.Context) (until time.Time, err error) {
	start := l.now()
	held, err := store.TakeLease(ctx, l.db, l.names, l.name, l.holder, l.ttl)
	switch {
	case errors.Is(err, store.ErrNoLeaseTable):
		return time.Time{}, err
	case err != nil:
		return time.Time{}, fmt.Errorf("relay: lease %q: %w", l.name, err)
	case !held:
		return time.Time{}, nil
	}
	return start.Add(l.ttl), nil
}

// Release gives the lease up if this holder has it, so that another takes it at once rather than after
// the expiry.
func (l *Lease) Release(ctx context.Context) error {
	if err := store.ReleaseLease(ctx, l.db, l.names, l.name, l.holder); err != nil {
		return fmt.Errorf("relay: release lease %q: %w", l.name, err)
	}
	return nil
}

// Leadership is what a holder knows of its lease: held until a local time, and the pass running under
// it, cancelled when the lease runs out unrenewed or is lost. The zero value is not held.
type Leadership struct {
	mu     sync.Mutex
	until  time.Time          // the lease is surely held before it; zero: not held
	cancel context.CancelFunc // of the pass in flight, if any
	expiry *time.Timer        // fires at until
}

// Held reports whether the lease is held at now.
func (l *Leadership) Held(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.until)
}

// Renew records the lease as held until until, and arms the expiry.
func (l *Leadership) Renew(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until = until
	d := time.Until(until)
	if l.expiry == nil {
		l.expiry = time.AfterFunc(d, l.expire)
		return
	}
	l.expiry.Reset(d)
}

// expire cancels the pass in flight once the lease has run out unrenewed.
func (l *Leadership) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := time.Until(l.until); d > 0 { // renewed meanwhile
		l.expiry.Reset(d)
		return
	}
	l.until = time.Time{}
	if l.cancel != nil {
		l.cancel()
	}
}

// Lose records that another holder has the lease.
func (l *Leadership) Lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until = time.Time{}
	if l.cancel != nil {
		l.cancel()
	}
}

// Begin starts a pass if the lease is held: its context is cancelled when the lease runs out or is lost.
// Call done when the pass is over.
func (l *Leadership) Begin(ctx context.Context) (pctx context.Context, done func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !time.Now().Before(l.until) {
		return nil, nil, false
	}
	pctx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	return pctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.cancel = nil
		cancel()
	}, true
}

// Stop disarms the expiry.
func (l *Leadership) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expiry != nil {
		l.expiry.Stop()
	}
}
