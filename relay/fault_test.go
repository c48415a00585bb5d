package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// roundBackoffLog is the message of the relay loop's backoffs. The keyed-event checker backs off in a loop
// of its own ("checking keyed events failed, backing off"), which the counts below must not mix in: seven
// backoffs of the two loops together may leave both short of the cap.
const roundBackoffLog = "round failed, backing off"

// requireBackoffCapped checks that the relay logged at least n backoffs, that their attempts count up and
// that no delay exceeded max, whose level was reached: with jitter a wait of d is drawn from (d/2, d], and
// only the level of max (a power-of-two multiple of RoundBackoff in these tests) can give more than max/2.
func requireBackoffCapped(t *testing.T, logs *logRecorder, n int, limit time.Duration) {
	t.Helper()
	recs := logs.matching(roundBackoffLog)
	require.GreaterOrEqual(t, len(recs), n)
	var longest time.Duration
	for _, r := range recs {
		d := attr(r, "delay").Duration()
		require.LessOrEqual(t, d, limit)
		require.Positive(t, attr(r, "attempt").Int64())
		longest = max(longest, d)
	}
	require.Greater(t, longest, limit/2, "the backoff reaches its cap")
}

func TestRedisRestartMidStream(t *testing.T) {
	t.Parallel()
	rd := outboxtest.StartRedis(t, nil)
	db, _ := outboxtest.Schema(t)
	b := setupWith(t, db, asynq.RedisClientOpt{Addr: rd.Addr()})
	const backoffMax = 160 * time.Millisecond
	r := b.newRelay(t, Config{BatchSize: 50, RoundBackoff: 10 * time.Millisecond, RoundBackoffMax: backoffMax,
		EnqueueTimeout: time.Second, PollInterval: 20 * time.Millisecond})
	run(t, r)

	// A producer commits events all along, outage included.
	var mu sync.Mutex
	var events []*model.Event
	produced := make(chan struct{})
	stopProducing := make(chan struct{})
	go func() {
		defer close(produced)
		for {
			select {
			case <-stopProducing:
				return
			default:
			}
			evs := make([]*model.Event, 0, 10)
			for range 10 {
				ev, err := model.NewEvent("test.event", map[string]int{}, model.WithQueue(b.queue))
				if err != nil {
					panic(err)
				}
				evs = append(evs, ev)
			}
			if _, err := db.NewInsert().Model(&evs).Exec(context.Background()); err != nil {
				t.Errorf("producer: %v", err)
				return
			}
			mu.Lock()
			events = append(events, evs...)
			mu.Unlock()
		}
	}()
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopProducing); <-produced }) }
	t.Cleanup(stop)

	outboxtest.WaitFor(t, 30*time.Second, "some rows published", func() bool { return published(t, db) >= 300 })
	rd.Stop(t)
	outboxtest.WaitFor(t, 30*time.Second, "the relay backing off to its cap", func() bool {
		return len(b.logs.matching(roundBackoffLog)) >= 7
	})
	before := published(t, db)
	rd.Start(t)
	outboxtest.WaitFor(t, 30*time.Second, "rows published after the restart", func() bool {
		return published(t, db) >= before+300
	})
	stop()
	outboxtest.WaitFor(t, time.Minute, "every committed row published", func() bool {
		return published(t, db) == int64(len(events))
	})
	requireBackoffCapped(t, b.logs, 7, backoffMax)
	require.NotEmpty(t, b.logs.matching("relay recovered"))
	require.Zero(t, outboxtest.Count(t, db, "outbox_events", "attempts > 0"), "an outage is not the rows' fault")
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	t.Logf("%d events, %d enqueue calls", len(events), b.enq.total)
}

func TestPostgresRestartMidStream(t *testing.T) {
	t.Parallel()
	pg := outboxtest.StartPostgres(t)
	db := pg.Schema(t)
	b := setupWith(t, db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	const backoffMax = 160 * time.Millisecond
	r := b.newRelay(t, Config{BatchSize: 50, Concurrency: 4, RoundBackoff: 10 * time.Millisecond, RoundBackoffMax: backoffMax})
	events := insertEvents(t, db, b.queue, 3000)
	run(t, r)

	outboxtest.WaitFor(t, 30*time.Second, "some rows published", func() bool { return published(t, db) >= 200 })
	pg.Stop(t)
	outboxtest.WaitFor(t, 30*time.Second, "the relay backing off to its cap", func() bool {
		return len(b.logs.matching(roundBackoffLog)) >= 7
	})
	pg.Start(t)
	ctx := context.Background()
	outboxtest.WaitFor(t, 30*time.Second, "PostgreSQL back", func() bool { return db.PingContext(ctx) == nil })
	var more []*model.Event
	outboxtest.WaitFor(t, 30*time.Second, "more events committed", func() bool {
		evs := make([]*model.Event, 0, 1000)
		for range 1000 {
			ev, err := model.NewEvent("test.event", map[string]int{}, model.WithQueue(b.queue))
			require.NoError(t, err)
			evs = append(evs, ev)
		}
		if _, err := db.NewInsert().Model(&evs).Exec(ctx); err != nil {
			t.Logf("insert after restart: %v", err) // a pooled connection of before the restart
			return false
		}
		more = evs
		return true
	})
	events = append(events, more...)
	outboxtest.WaitFor(t, time.Minute, "every committed row published", func() bool {
		return published(t, db) == int64(len(events))
	})
	requireBackoffCapped(t, b.logs, 7, backoffMax)
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	t.Logf("%d events, %d enqueue calls", len(events), b.enq.total)
}
