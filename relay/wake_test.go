package relay

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/maintenance/wakeup"
	"github.com/bunbox/bunbox/internal/outboxtest"
)

// quietConfig is a relay whose poll cannot be what finds a row within a test: the poll and the adaptive
// poll wait a minute, and it does not listen for notifications. Only the wake-up (on by default) is left.
func quietConfig() Config {
	return Config{PollInterval: time.Minute, MinPollInterval: time.Minute, DisableNotify: true, DisableReconciler: true}
}

// waitIdle waits until the relay's wake-up has read the sequence n more times: the relay has been idle
// for at least n wake intervals.
func waitIdle(t *testing.T, r *Relay, n int64) {
	t.Helper()
	from := r.wake.Reads.Load()
	outboxtest.WaitFor(t, 30*time.Second, "the relay idle", func() bool { return r.wake.Reads.Load() >= from+n })
}

// With the default settings, an event committed after a quiet spell is relayed by the wake-up, well
// before the poll (a minute here) could find it: directly and, in the pooler pass, through PgBouncer in
// transaction mode.
func TestWakeUpByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newRelay(t, quietConfig())
	require.Equal(t, wakeIntervalDefault, r.cfg.WakeInterval)
	run(t, r)
	for i := range 3 {
		waitIdle(t, r, 40)
		insertEvents(t, b.db, b.queue, 1)
		outboxtest.WaitFor(t, 30*time.Second, "the event after a quiet spell relayed", func() bool {
			return published(t, b.db) == int64(i+1)
		})
	}
	require.Empty(t, b.logs.matching("no wake-up after a quiet spell"))
}

// A transaction that inserted and has not committed yet moves the sequence: the round it wakes finds
// nothing, and the wake-up keeps waking the relay, so the row is relayed soon after the commit.
func TestWakeUpAfterLateCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newRelay(t, quietConfig())
	run(t, r)
	waitIdle(t, r, 10)
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	insertEvents(t, tx, b.queue, 1)
	waitIdle(t, r, 3) // the move seen, and a round woken that found nothing
	require.Zero(t, published(t, b.db))
	require.NoError(t, tx.Commit())
	outboxtest.WaitFor(t, 30*time.Second, "the event relayed after its late commit", func() bool {
		return published(t, b.db) == 1
	})
}

// WakeInterval -1 turns the wake-up off: the relay does not read the sequence.
func TestWakeUpOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := quietConfig()
	cfg.PollInterval, cfg.MinPollInterval, cfg.WakeInterval = 20*time.Millisecond, 20*time.Millisecond, -1
	r := b.newRelay(t, cfg)
	run(t, r)
	insertEvents(t, b.db, b.queue, 1)
	outboxtest.WaitFor(t, 30*time.Second, "the event relayed by the poll", func() bool {
		return published(t, b.db) == 1
	})
	require.Zero(t, r.wake.Reads.Load())
}

// A role that may not read the sequence gets a warning that says what to grant, and the poll relays.
func TestWakeUpWithoutSequencePrivilege(t *testing.T) {
	outboxtest.SkipPooled(t, "it creates a login role, which the test PgBouncer has no auth entry for; the direct pass runs it")
	t.Parallel()
	ctx := context.Background()
	db, schema := outboxtest.Schema(t)
	role := "bunbox_nowake_" + schema[len("bunbox_test_"):]
	password := "pw" + randHex(8)
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN NOSUPERUSER NOINHERIT PASSWORD '" + password + "'",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, UPDATE ON ALL TABLES IN SCHEMA " + schema + " TO " + role, // not the sequence
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := db.ExecContext(context.Background(), stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	u, err := url.Parse(outboxtest.DatabaseURL())
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)
	restricted := outboxtest.OpenURL(t, u.String(), map[string]any{"search_path": schema})

	b := setupWith(t, restricted, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	cfg := quietConfig()
	cfg.PollInterval, cfg.MinPollInterval = 50*time.Millisecond, 50*time.Millisecond
	r := b.newRelay(t, cfg)
	run(t, r)
	outboxtest.WaitFor(t, 30*time.Second, "the warning", func() bool {
		return len(b.logs.matching("no wake-up after a quiet spell")) == 1
	})
	msg := b.logs.matching("no wake-up after a quiet spell")[0].Message
	require.Contains(t, msg, "GRANT USAGE ON SEQUENCE "+schema+".outbox_events_id_seq TO "+role)
	insertEvents(t, db, b.queue, 1)
	outboxtest.WaitFor(t, 30*time.Second, "the event relayed by the poll", func() bool {
		return published(t, db) == 1
	})
	require.Zero(t, r.wake.Reads.Load())
}

func TestWakeIntervalDefault(t *testing.T) {
	t.Parallel()
	require.Equal(t, wakeIntervalDefault, Config{}.withDefaults().WakeInterval)
}

// A relay of a schema (Config.Location) watches the sequence of that schema's outbox, not the one
// search_path finds.
func TestWakeUpWatchesItsSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := outboxtest.TenantSchema(t, b.db, "tenant_w_")
	cfg := quietConfig()
	cfg.Location.Schema = s
	r := b.newRelay(t, cfg)
	seq, ok := r.watcher.Sequence(context.Background())
	require.True(t, ok)
	require.Contains(t, []string{s + ".outbox_events_id_seq", `"` + s + `".outbox_events_id_seq`}, seq)
}

// While the relay polls at MinPollInterval after rows (hotWindow), the watcher neither reads nor wakes
// every WakeInterval: it sleeps until the window ends, then reads again, and an event after a quiet spell
// is relayed by the wake-up as before.
func TestWakeUpSleepsWhileRowsCome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := quietConfig()
	cfg.MinPollInterval = wakeIntervalDefault // the default: the loop polls as often as the wake-up looks
	r := b.newRelay(t, cfg)
	run(t, r)
	waitIdle(t, r, 5)
	insertEvents(t, b.db, b.queue, 1)
	outboxtest.WaitFor(t, 30*time.Second, "the event relayed", func() bool { return published(t, b.db) == 1 })
	claimedAt := time.Unix(0, r.wake.RowsAt.Load())
	wakes, reads := r.wake.Wakes.Load(), r.wake.Reads.Load()
	outboxtest.WaitFor(t, 30*time.Second, "most of the hot window gone", func() bool {
		return time.Since(claimedAt) >= hotWindow*3/4
	})
	if time.Since(claimedAt) < hotWindow { // not a slow machine that overslept the window
		require.LessOrEqual(t, r.wake.Wakes.Load()-wakes, int64(2), "the watcher woke while the relay was hot")
		require.LessOrEqual(t, r.wake.Reads.Load()-reads, int64(1), "the watcher read while the relay was hot")
	}
	waitIdle(t, r, 5) // reading again after the window
	insertEvents(t, b.db, b.queue, 1)
	outboxtest.WaitFor(t, 30*time.Second, "the event after the hot window relayed", func() bool {
		return published(t, b.db) == 2
	})
}

func TestWakeHotFor(t *testing.T) {
	t.Parallel()
	cfg := Config{}.withDefaults()
	var w wakeup.State
	hotFor := func(now time.Time) time.Duration {
		return w.HotFor(cfg.MinPollInterval, cfg.WakeInterval, hotWindow, now)
	}
	now := time.Now()
	require.Zero(t, hotFor(now), "no rows claimed yet")
	w.RowsAt.Store(now.Add(-300 * time.Millisecond).UnixNano())
	require.Equal(t, hotWindow-300*time.Millisecond, hotFor(now))
	w.RowsAt.Store(now.Add(-hotWindow).UnixNano())
	require.Zero(t, hotFor(now), "the window ended")
	w.RowsAt.Store(now.UnixNano())
	cfg.MinPollInterval = 2 * cfg.WakeInterval
	require.Zero(t, hotFor(now), "a loop that polls less often than the wake-up looks")
}
