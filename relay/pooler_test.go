package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/maintenance/listen"
	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// pooledDatabase is a fresh database with bunbox's schema, reached both through PgBouncer in transaction
// mode (pool size 2) and directly, whatever pass this is.
type pooledDatabase struct {
	name      string
	directURL string
	direct    *bun.DB
}

func newPooledDatabase(t *testing.T) *pooledDatabase {
	t.Helper()
	outboxtest.RequirePooler(t)
	name := outboxtest.NewDatabase(t)
	direct := outboxtest.OpenDirectDB(t, name)
	require.NoError(t, bunboxmigrate.Up(context.Background(), direct))
	u, err := url.Parse(outboxtest.DatabaseURL())
	require.NoError(t, err)
	u.Path = "/" + name
	return &pooledDatabase{name: name, directURL: u.String(), direct: direct}
}

// TestListenOnlyWhenDirect checks where the relay LISTENs: on a direct connection it does; through
// PgBouncer it does not (it says why, and polls), and no LISTEN reaches the server; with Config.ListenURL
// naming a direct connection it listens there and a NOTIFY wakes it, although its rounds go through the
// pooler; a ListenURL to another database is refused with a warning.
func TestListenOnlyWhenDirect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pd := newPooledDatabase(t)
	pooled := outboxtest.OpenPooled(t, pd.name, nil)

	t.Run("DirectIsTold", func(t *testing.T) {
		l, err := listen.New(pd.direct, listen.Config{Channel: notifyChannel, Wake: func() {}})
		require.NoError(t, err)
		reason, err := l.NotDirect(ctx, pd.direct)
		require.NoError(t, err)
		require.Empty(t, reason, "a direct connection of %T", pd.direct.Driver())
		reason, err = l.NotDirect(ctx, pooled)
		require.NoError(t, err)
		require.Contains(t, reason, "go through a pooler")
	})

	t.Run("PooledPolls", func(t *testing.T) {
		b := setupWith(t, pooled, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
		r := b.newRelay(t, Config{})
		run(t, r)
		outboxtest.WaitFor(t, 10*time.Second, "the relay saying it does not listen", func() bool {
			return len(b.logs.matching("not listening for notifications")) == 1
		})
		require.Empty(t, b.logs.matching("bunbox relay: listening for notifications"), "no LISTEN")
		var listens int
		require.NoError(t, pd.direct.NewRaw(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query ILIKE 'LISTEN%'`).Scan(ctx, &listens))
		require.Zero(t, listens, "no session of the database ran LISTEN")
		events := insertEvents(t, pooled, b.queue, 3)
		outboxtest.WaitFor(t, 30*time.Second, "the events relayed by the poll", func() bool {
			return published(t, pd.direct) >= 3
		})
		requireDeliveredOnce(t, b.inspector, b.queue, events)
	})

	t.Run("ListenURL", func(t *testing.T) {
		// Rows committed before this subtest's relay started are published by then: count from here.
		before := published(t, pd.direct)
		require.NoError(t, EnableNotifyTrigger(ctx, pd.direct, model.Location{}))
		t.Cleanup(func() { _ = DisableNotifyTrigger(ctx, pd.direct, model.Location{}) })
		b := setupWith(t, pooled, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
		r := b.newRelay(t, Config{ListenURL: pd.directURL, PollInterval: time.Hour, MinPollInterval: time.Hour})
		run(t, r)
		outboxtest.WaitFor(t, 10*time.Second, "the listener confirmed on ListenURL", func() bool {
			return len(b.logs.matching("bunbox relay: listening for notifications")) >= 1
		})
		insertEvents(t, pooled, b.queue, 1)
		outboxtest.WaitFor(t, 10*time.Second, "the event relayed after its NOTIFY", func() bool {
			return published(t, pd.direct) == before+1
		})
	})

	t.Run("ListenURLOtherDatabase", func(t *testing.T) {
		b := setupWith(t, pooled, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
		r := b.newRelay(t, Config{ListenURL: outboxtest.DatabaseURL()})
		run(t, r)
		outboxtest.WaitFor(t, 10*time.Second, "the warning about ListenURL's database", func() bool {
			return len(b.logs.matching("not listening for notifications: Config.ListenURL names database")) == 1
		})
	})
}

// TestTwoRelaysThroughPooler drains through PgBouncer in transaction mode (pool size 2) with two relays of
// the default Config, each with a pool of its own, while four writers commit events through the same
// pooler, and the NOTIFY trigger is on (a LISTEN on a pooled server connection would hand its
// notifications to a writer's commit). No round fails, and every event is enqueued exactly once.
func TestTwoRelaysThroughPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pd := newPooledDatabase(t)
	require.NoError(t, EnableNotifyTrigger(ctx, pd.direct, model.Location{}))
	writerDB := outboxtest.OpenPooled(t, pd.name, nil)
	b := setupWith(t, writerDB, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})

	var failedRounds atomic.Int64
	var roundErrs sync.Map
	obs := Observer{OnBatch: func(_ context.Context, ev BatchEvent) {
		if ev.Err != nil {
			failedRounds.Add(1)
			roundErrs.Store(ev.Err.Error(), true)
		}
	}}
	relays := make([]*Relay, 2)
	for i := range relays {
		db := outboxtest.OpenPooled(t, pd.name, nil)
		r, err := New(db, b.redis, Config{Enqueuer: b.enq, Logger: b.logs.logger(), Observer: obs, BatchSize: 50})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		relays[i] = r
		run(t, r)
	}

	const writers, txs = 4, 100
	var mu sync.Mutex
	var events []*model.Event
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 17))
			for i := range txs {
				n := 1 + rnd.IntN(3)
				evs := make([]*model.Event, n)
				for j := range evs {
					ev, err := model.NewEvent("pooled.event", map[string]any{"w": w, "i": i, "j": j},
						model.WithQueue(b.queue), model.WithMaxRetry(rnd.IntN(5)),
						model.WithMetadata("writer", fmt.Sprint(w)))
					if err != nil {
						t.Error(err)
						return
					}
					evs[j] = ev
				}
				err := writerDB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					_, err := tx.NewInsert().Model(&evs).Exec(ctx)
					return err
				})
				if err != nil {
					t.Errorf("writer %d transaction %d: %v", w, i, err)
					return
				}
				mu.Lock()
				events = append(events, evs...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	outboxtest.WaitFor(t, 60*time.Second, "every event published", func() bool {
		return published(t, pd.direct) == int64(len(events))
	})
	roundErrs.Range(func(k, _ any) bool { t.Logf("failed round: %v", k); return true })
	require.Zero(t, failedRounds.Load(), "failed rounds")
	for _, r := range relays {
		require.Zero(t, r.Stats().FailedRounds)
	}
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	b.enq.mu.Lock()
	defer b.enq.mu.Unlock()
	for _, ev := range events {
		require.Equal(t, 1, b.enq.calls[ev.EventID.String()], "enqueues of event %s", ev.EventID)
	}
	t.Logf("two relays through the pooler: %d transactions, %d events, each enqueued once; %d failed rounds",
		writers*txs, len(events), failedRounds.Load())
}
