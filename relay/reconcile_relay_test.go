package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// quickOrder is the business model of the quick start: bunx.Hooks writes its event.
type quickOrder struct {
	bun.BaseModel `bun:"table:quick_orders"`
	bunx.Hooks    `bun:"-"`

	ID int64 `bun:",pk,autoincrement"`
	N  int   `bun:",notnull"`
}

// countTasks counts the events of ids whose task asynq has (in any state), with one pipeline of EXISTS.
func countTasks(t *testing.T, rdb *redis.Client, queue string, ids []uuid.UUID) int {
	t.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Exists(ctx, "asynq:{"+queue+"}:t:"+id.String())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return -1 // Redis restarting: not yet
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n
}

// startRelay runs r until the test ends, or until the returned stop is called.
func startRelay(t *testing.T, r *relay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

// The README's three steps and nothing else (hooks, RunInTx, the relay with a zero Config but for a
// short reconciler interval, for the test's patience): Redis then loses its data (a restart without
// persistence, FLUSHALL), and every committed event is back in asynq within about two intervals.
func TestQuickStartSurvivesRedisDataLoss(t *testing.T) {
	t.Parallel()
	for _, loss := range []string{"restart", "flushall"} {
		t.Run(loss, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _ := outboxtest.Schema(t)
			rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
			opt := asynq.RedisClientOpt{Addr: rd.Addr()}
			rdb := redis.NewClient(&redis.Options{Addr: rd.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			_, err := db.NewCreateTable().Model((*quickOrder)(nil)).Exec(ctx)
			require.NoError(t, err)

			// 1. Register the hooks.
			ob := bunx.New(db)
			bunx.OnInsert(ob, func(_ context.Context, o *quickOrder) ([]*model.Event, error) {
				ev, err := model.NewEvent("order.placed", map[string]any{"order_id": o.ID, "n": o.N})
				return []*model.Event{ev}, err
			})
			// 3. Run the relay.
			const interval = time.Second
			r, err := relay.New(db, opt, relay.Config{Logger: outboxtest.Logger(t),
				Reconciler: relay.ReconcilerConfig{Interval: interval}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = r.Close() })
			startRelay(t, r)

			// 2. The business code: plain RunInTx.
			const n = 200
			for i := range n {
				require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					_, err := tx.NewInsert().Model(&quickOrder{N: i}).Exec(ctx)
					return err
				}))
			}
			var ids []uuid.UUID
			require.NoError(t, db.NewRaw("SELECT event_id FROM outbox_events").Scan(ctx, &ids))
			require.Len(t, ids, n)
			outboxtest.WaitFor(t, 60*time.Second, "200 events delivered", func() bool {
				return countTasks(t, rdb, "default", ids) == n
			})

			switch loss {
			case "restart":
				rd.Stop(t)
				rd.Start(t)
			case "flushall":
				require.NoError(t, rdb.FlushAll(ctx).Err())
			}
			lost := time.Now()
			require.Zero(t, countTasks(t, rdb, "default", ids), "Redis lost every task")
			outboxtest.WaitFor(t, 90*time.Second, "every committed event back in asynq", func() bool {
				return countTasks(t, rdb, "default", ids) == n
			})
			t.Logf("%s: all %d events back in asynq %s after the loss (reconciler interval %s)",
				loss, n, time.Since(lost).Round(time.Millisecond), interval)
			outboxtest.WaitFor(t, 30*time.Second, "every row marked published again", func() bool {
				return outboxtest.CountDelivered(t, db, "") == n
			})
		})
	}
}

// A relay with the zero Config reconciles: its first pass, as it starts, finds the tasks that Redis lost
// while no relay ran.
func TestRelayReconcilesByDefault(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	events := b.insert(t, 30)
	b.relayAll(t)
	b.requireTasks(t, events)
	rdb := redis.NewClient(&redis.Options{Addr: b.redis.Addr()})
	defer rdb.Close()
	require.NoError(t, rdb.FlushAll(context.Background()).Err())

	r, err := relay.New(b.db, b.opt, relay.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	startRelay(t, r)
	ids := make([]uuid.UUID, len(events))
	for i, ev := range events {
		ids[i] = ev.EventID
	}
	outboxtest.WaitFor(t, 60*time.Second, "the lost tasks back", func() bool {
		return countTasks(t, rdb, b.queue, ids) == len(ids)
	})
}

// pass is one reconciler pass of one of several relays.
type pass struct {
	relay      int
	start, end time.Time
}

type passLog struct {
	mu     sync.Mutex
	passes []pass
}

func (l *passLog) onPass(i int) func(relay.ReconcileResult, error) {
	return func(res relay.ReconcileResult, _ error) {
		now := time.Now()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.passes = append(l.passes, pass{relay: i, start: now.Add(-res.Duration), end: now})
	}
}

func (l *passLog) snapshot() []pass {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]pass(nil), l.passes...)
}

// N relays with the default Config: exactly one reconciles at a time. A holder that died without a word
// (its lease row left behind, as after SIGKILL) is replaced once its lease expired; a holder that stops
// gives the lease up, and another relay takes over.
func TestRelaysReconcileOneAtATime(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	b.insert(t, 20)

	// A holder killed a moment ago: its lease runs for 2 s more.
	before := time.Now()
	_, err := b.db.ExecContext(ctx, `INSERT INTO bunbox_leases (name, holder, expires_at)
VALUES ('bunbox.reconciler', 'killed-relay', clock_timestamp() + interval '2 seconds')`)
	require.NoError(t, err)

	const relays = 3
	var log passLog
	stops := make([]func(), relays)
	for i := range relays {
		r, err := relay.New(b.db, b.opt, relay.Config{Logger: outboxtest.Logger(t).With("relay", i),
			Reconciler: relay.ReconcilerConfig{Interval: 100 * time.Millisecond, LeaseTTL: time.Second, OnPass: log.onPass(i)}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		stops[i] = startRelay(t, r)
	}
	outboxtest.WaitFor(t, 60*time.Second, "five passes", func() bool { return len(log.snapshot()) >= 5 })
	first := log.snapshot()
	require.True(t, first[0].start.After(before.Add(2*time.Second)), "no pass while the killed relay's lease ran")
	holder := first[0].relay
	for _, p := range first {
		require.Equal(t, holder, p.relay, "one relay reconciles")
	}

	// The holder stops: another takes over.
	stops[holder]()
	n := len(log.snapshot())
	outboxtest.WaitFor(t, 60*time.Second, "another relay reconciles", func() bool {
		ps := log.snapshot()
		return len(ps) >= n+5 && ps[len(ps)-1].relay != holder
	})

	all := log.snapshot()
	holders := map[int]bool{}
	for i, p := range all {
		holders[p.relay] = true
		for _, q := range all[i+1:] {
			if q.relay != p.relay {
				require.False(t, q.start.Before(p.end) && p.start.Before(q.end),
					"passes of relays %d and %d overlap: %v and %v", p.relay, q.relay, p, q)
			}
		}
	}
	require.Len(t, holders, 2, "the first holder, then one other: %v", holders)
	require.EqualValues(t, 1, outboxtest.Count(t, b.db, "bunbox_leases", "name = 'bunbox.reconciler'"))
}

// The reconciler's settings in the relay's Config are validated with New, naming the field.
func TestRelayReconcilerConfigValidated(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	opt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	for _, tc := range []struct {
		cfg  relay.Config
		want string
	}{
		{relay.Config{Reconciler: relay.ReconcilerConfig{Window: 48 * time.Hour}}, "Reconciler.Window must be shorter than TaskRetention"},
		{relay.Config{Reconciler: relay.ReconcilerConfig{LeaseTTL: time.Millisecond}}, "Reconciler.LeaseTTL must be between 1s and 1h"},
		{relay.Config{Reconciler: relay.ReconcilerConfig{BatchSize: -1}}, "Reconciler.BatchSize"},
	} {
		_, err := relay.New(db, opt, tc.cfg)
		require.ErrorIs(t, err, relay.ErrInvalidConfig)
		require.ErrorContains(t, err, tc.want)
		tc.cfg.DisableReconciler = true
		r, err := relay.New(db, opt, tc.cfg)
		require.NoError(t, err, "not checked when the reconciler is off")
		require.NoError(t, r.Close())
	}
	// A short TaskRetention shortens the default Window: New accepts it.
	r, err := relay.New(db, opt, relay.Config{TaskRetention: 10 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, r.Close())
}
