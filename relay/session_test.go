package relay

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	bunboxmigrate "github.com/bunbox/bunbox/migrate"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
)

func TestConfigSessionBounds(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	require.Equal(t, idleInTransactionTimeoutDefault, c.IdleInTransactionTimeout)
	require.Equal(t, statementTimeoutDefault, c.StatementTimeout)
	require.Equal(t, lockTimeoutDefault, c.LockTimeout)
	b := c.bounds()
	for _, want := range []string{"('idle_in_transaction_session_timeout', '15000')", "('tcp_user_timeout', '15000')",
		"('statement_timeout', '30000')", "('lock_timeout', '10000')"} {
		require.Contains(t, b.sql, want)
	}
	require.Equal(t, 5*time.Second, b.keepAlive)

	// Negative leaves the server's setting: nothing to set, no keep-alive.
	c = Config{IdleInTransactionTimeout: -1, StatementTimeout: -1, LockTimeout: -1}.withDefaults()
	require.NoError(t, c.validate())
	require.Equal(t, sessionBounds{}, c.bounds())
	c = Config{IdleInTransactionTimeout: -1}.withDefaults()
	require.NotContains(t, c.bounds().sql, "idle_in_transaction")
	require.NotContains(t, c.bounds().sql, "tcp_user_timeout")
	require.Zero(t, c.bounds().keepAlive)

	for _, tt := range []struct {
		cfg   Config
		field string
	}{
		{Config{IdleInTransactionTimeout: 500 * time.Millisecond}, "IdleInTransactionTimeout"},
		{Config{StatementTimeout: time.Millisecond}, "StatementTimeout"},
		{Config{LockTimeout: time.Microsecond}, "LockTimeout"},
	} {
		err := tt.cfg.withDefaults().validate()
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.ErrorContains(t, err, tt.field+" must be at least")
	}
}

// TestBeginBounded: a relay transaction is READ COMMITTED and carries the bounds, as SET LOCAL: they end
// with it.
func TestBeginBounded(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	db, _ := outboxtest.Schema(t)
	db.SetMaxOpenConns(1) // the SHOW after the commit runs on the connection of the transaction
	ctx := context.Background()
	cfg := Config{IdleInTransactionTimeout: 7 * time.Second, StatementTimeout: 8 * time.Second, LockTimeout: 9 * time.Second}.withDefaults()
	tx, err := beginBounded(ctx, db, cfg.bounds())
	require.NoError(t, err)
	show := func(db bun.IDB, name string) string {
		var v string
		require.NoError(t, db.NewRaw("SELECT current_setting(?)", name).Scan(ctx, &v))
		return v
	}
	require.Equal(t, "7s", show(tx, "idle_in_transaction_session_timeout"))
	require.Equal(t, "7000", show(tx, "tcp_user_timeout")) // in ms, as the server shows it
	require.Equal(t, "8s", show(tx, "statement_timeout"))
	require.Equal(t, "9s", show(tx, "lock_timeout"))
	require.Equal(t, "read committed", show(tx, "transaction_isolation"))
	require.NoError(t, tx.Commit())
	require.Equal(t, "0", show(db, "idle_in_transaction_session_timeout"))
	require.Equal(t, "0", show(db, "statement_timeout"))
}

// TestIdleInTransactionReleasesClaims: a relay whose transaction goes silent with rows claimed (what a
// network partition does to it) loses the claims after IdleInTransactionTimeout, and another relay delivers
// them; the silent one's commit fails.
func TestIdleInTransactionReleasesClaims(t *testing.T) {
	t.Parallel()
	b := setupPerRow(t)
	ctx := context.Background()
	events := insertEvents(t, b.db, b.queue, 50)
	dark := b.newRelay(t, Config{IdleInTransactionTimeout: time.Second})
	tx, err := dark.begin(ctx)
	require.NoError(t, err)
	claimed, _, err := claim(ctx, tx, store.NewClaims(tables.Default(), store.NewPrepared(ctx, nil, false, tables.Default())), 100, 1<<20, false)
	require.NoError(t, err)
	require.Len(t, claimed, len(events))
	start := time.Now()

	other := b.newRelay(t, Config{})
	run(t, other)
	outboxtest.WaitFor(t, 30*time.Second, "the other relay delivers the claimed rows", func() bool {
		return published(t, b.db) == int64(len(events))
	})
	t.Logf("claims released and delivered %s after the claim", time.Since(start).Round(time.Millisecond))
	require.Error(t, tx.Commit(), "the silent transaction was ended by the server")
	requireDeliveredOnce(t, b.inspector, b.queue, events)
}

// TestKeepAliveLongRound: a round that waits on Redis longer than IdleInTransactionTimeout is not ended by
// it: the relay shows the server it is alive.
func TestKeepAliveLongRound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := insertEvents(t, b.db, b.queue, 3)
	var slowed atomic.Bool
	b.enq.before = func(int) {
		if slowed.CompareAndSwap(false, true) {
			time.Sleep(3 * time.Second) // a slow Redis, not a wait for something
		}
	}
	var failed atomic.Int64
	r := b.newRelay(t, Config{IdleInTransactionTimeout: time.Second, Concurrency: 1, Workers: 1,
		Observer: Observer{OnBatch: func(_ context.Context, ev BatchEvent) {
			if ev.Err != nil {
				failed.Add(1)
				t.Logf("round failed: %v", ev.Err)
			}
		}}})
	run(t, r)
	outboxtest.WaitFor(t, 30*time.Second, "all published", func() bool { return published(t, b.db) == int64(len(events)) })
	require.Zero(t, failed.Load(), "failed rounds")
	for _, ev := range events {
		require.Equal(t, 1, b.enq.count(ev.EventID.String()), "enqueues of %s", ev.EventID)
	}
}

// TestRelaySerializableDatabase: on a database whose default_transaction_isolation is serializable, the
// relay's rounds still run READ COMMITTED: two relays of two workers deliver 1,200 events with no failed
// round (before, rounds failed with 40001 and backed off).
func TestRelaySerializableDatabase(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	admin := outboxtest.Open(t, nil)
	name := "bunbox_serializable_" + randHex(6)
	_, err := admin.ExecContext(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	_, err = admin.ExecContext(ctx, "ALTER DATABASE "+name+" SET default_transaction_isolation = serializable")
	require.NoError(t, err)
	u, err := url.Parse(outboxtest.DatabaseURL())
	require.NoError(t, err)
	u.Path = "/" + name
	db := outboxtest.OpenURL(t, u.String(), nil)
	var iso string
	require.NoError(t, db.NewRaw("SHOW default_transaction_isolation").Scan(ctx, &iso))
	require.Equal(t, "serializable", iso)
	require.NoError(t, bunboxmigrate.Up(ctx, db))

	b := setupWith(t, db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	const n = 1200
	var failed atomic.Int64
	var mu sync.Mutex
	var firstErr string
	obs := Observer{OnBatch: func(_ context.Context, ev BatchEvent) {
		if ev.Err != nil {
			failed.Add(1)
			mu.Lock()
			if firstErr == "" {
				firstErr = ev.Err.Error()
			}
			mu.Unlock()
		}
	}}
	var relays []*Relay
	for range 2 {
		relays = append(relays, b.newRelay(t, Config{BatchSize: 50, Workers: 2, Observer: obs}))
	}
	for _, r := range relays {
		run(t, r)
	}
	for range n / 100 { // committed while the relays run, as in production
		insertEvents(t, db, b.queue, 100)
	}
	outboxtest.WaitFor(t, 60*time.Second, "all published", func() bool { return published(t, db) == n })
	require.Zerof(t, failed.Load(), "failed rounds (first: %s)", firstErr)
	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, n, info.Size)
}
