package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
)

// One holder at a time: a second cannot take the lease while it is held, takes it once it expired
// unrenewed (a holder killed without a word), and at once when the holder gives it up.
func TestLeaseOneHolderAtATime(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	a := New(db, tables.Default(), "test", 2*time.Second)
	b := New(db, tables.Default(), "test", 2*time.Second)
	require.NotEqual(t, a.Holder(), b.Holder())

	before := time.Now()
	until, err := a.Take(ctx)
	require.NoError(t, err)
	require.False(t, until.Before(before.Add(2*time.Second)))
	require.False(t, until.After(time.Now().Add(2*time.Second)), "the term counts from before the statement")
	until, err = b.Take(ctx)
	require.NoError(t, err)
	require.True(t, until.IsZero(), "held by a")
	until, err = a.Take(ctx)
	require.NoError(t, err)
	require.False(t, until.IsZero(), "a renews")

	// a stops renewing: b takes the lease once it expired, not before.
	var expires time.Time
	require.NoError(t, db.NewRaw("SELECT expires_at FROM bunbox_leases WHERE name = 'test'").Scan(ctx, &expires))
	outboxtest.WaitFor(t, 30*time.Second, "b takes the expired lease", func() bool {
		until, err := b.Take(ctx)
		require.NoError(t, err)
		if !until.IsZero() {
			require.False(t, time.Now().Before(expires), "taken before the expiry")
			return true
		}
		return false
	})
	until, err = a.Take(ctx)
	require.NoError(t, err)
	require.True(t, until.IsZero(), "a lost it")

	// b gives it up: a takes it at once.
	require.NoError(t, b.Release(ctx))
	until, err = a.Take(ctx)
	require.NoError(t, err)
	require.False(t, until.IsZero())
	require.NoError(t, b.Release(ctx), "releasing a lease held by another changes nothing")
	require.EqualValues(t, 1, outboxtest.Count(t, db, "bunbox_leases", "name = 'test' AND holder = ?", a.Holder()))
}

// A database whose migrations stop before the lease table: take says so, release is a no-op.
func TestLeaseWithoutTable(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, "DROP TABLE bunbox_leases")
	require.NoError(t, err)
	l := New(db, tables.Default(), "test", time.Second)
	_, err = l.Take(ctx)
	require.ErrorIs(t, err, store.ErrNoLeaseTable)
	require.NoError(t, l.Release(ctx))
}
