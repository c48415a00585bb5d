package migrate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// TestUpThroughPooler runs Up from six replicas at once, each with a pool of its own through PgBouncer in
// transaction mode (default_pool_size 2), then Up on a direct connection: the direct Up completes within
// its deadline, because no server connection kept the migration lock once the six were done (a
// session-level advisory lock was stranded on an idle pooled connection, and the next Up waited forever).
func TestUpThroughPooler(t *testing.T) {
	t.Parallel()
	outboxtest.RequirePooler(t)
	name := outboxtest.NewDatabase(t)
	ctx := context.Background()

	const replicas = 6
	dbs := make([]*bun.DB, replicas)
	for i := range dbs {
		dbs[i] = outboxtest.OpenPooled(t, name, nil)
	}
	for round := range 3 { // the first round migrates, the next two find the schema up to date
		errs := make(chan error, replicas)
		for _, db := range dbs {
			go func() {
				uctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				errs <- bunboxmigrate.Up(uctx, db)
			}()
		}
		for range replicas {
			require.NoError(t, <-errs, "round %d", round)
		}
	}

	direct := outboxtest.OpenDirectDB(t, name)
	var held int
	require.NoError(t, direct.NewRaw(`SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(ctx, &held))
	require.Zero(t, held, "no server connection keeps an advisory lock after the six Up")

	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, bunboxmigrate.Up(dctx, direct), "a direct Up after the pooled ones")
	status, err := bunboxmigrate.Status(ctx, direct)
	require.NoError(t, err)
	require.Len(t, status.Applied(), len(status))
}

// TestUpWaitsForTheLock holds the migration lock as a concurrent Up would, and checks that Up waits for it
// (until its context ends, with an error that says so) and proceeds once it is released.
func TestUpWaitsForTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})

	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback() })
	_, err = holder.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?)", int64(0x62756e626f78))
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorContains(t, bunboxmigrate.Up(wctx, db), "waiting for another migration to finish")

	done := make(chan error, 1)
	go func() { done <- bunboxmigrate.Up(ctx, db) }()
	require.NoError(t, holder.Rollback())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Up did not proceed within 30s of the lock's release")
	}
}

// TestUpOfAnotherLocationWaitsForTheLock holds the migration lock as an Up of the default outbox would, and
// checks that an Up of a tenant's schema waits for it too: the lock is one for the database.
func TestUpOfAnotherLocationWaitsForTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewDatabase(t)
	db := outboxtest.OpenDirectDB(t, name)

	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback() })
	_, err = holder.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?)", int64(0x62756e626f78))
	require.NoError(t, err)

	loc := bunboxmigrate.WithLocation(model.Location{Schema: "tenant_lock", TablePrefix: "orders_"})
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorContains(t, bunboxmigrate.Up(wctx, db, loc), "waiting for another migration to finish")

	require.NoError(t, holder.Rollback())
	uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, bunboxmigrate.Up(uctx, db, loc))
}

// TestTenantsUpThroughPooler migrates six tenants' schemas at once, each from a pool of its own through
// PgBouncer in transaction mode (default_pool_size 2: two server connections for the database): every Up
// completes. With a lock per schema, each Up held one of the two server connections for its lock and
// waited for a second one, which the other holder kept: they waited until their deadlines.
func TestTenantsUpThroughPooler(t *testing.T) {
	t.Parallel()
	outboxtest.RequirePooler(t)
	name := outboxtest.NewDatabase(t)
	ctx := context.Background()

	const tenants = 6
	dbs := make([]*bun.DB, tenants)
	for i := range dbs {
		dbs[i] = outboxtest.OpenPooled(t, name, nil)
	}
	errs := make(chan error, tenants)
	for i, db := range dbs {
		go func() {
			uctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			errs <- bunboxmigrate.Up(uctx, db, bunboxmigrate.WithLocation(model.Location{Schema: fmt.Sprintf("tenant_%d", i)}))
		}()
	}
	for range tenants {
		require.NoError(t, <-errs)
	}
	direct := outboxtest.OpenDirectDB(t, name)
	for i := range tenants {
		status, err := bunboxmigrate.Status(ctx, direct, bunboxmigrate.WithLocation(model.Location{Schema: fmt.Sprintf("tenant_%d", i)}))
		require.NoError(t, err)
		require.Len(t, status.Applied(), len(status), "tenant_%d", i)
	}
}
