package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

func TestThreeRelaysDeliverBacklogExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := insertEvents(t, b.db, b.queue, 10_000)

	relays := make([]*Relay, 3)
	for i := range relays {
		relays[i] = b.newRelay(t, Config{BatchSize: 100, Concurrency: 16})
	}
	for _, r := range relays {
		run(t, r)
	}
	outboxtest.WaitFor(t, 2*time.Minute, "all 10000 rows published", func() bool {
		return published(t, b.db) == 10_000
	})
	// A relay counts its rows after its commit, so its Stats may trail what the table already shows.
	statsTotal := func() (total int64) {
		for _, r := range relays {
			total += r.Stats().Published
		}
		return total
	}
	outboxtest.WaitFor(t, 30*time.Second, "the relays' Stats to count 10000 rows", func() bool {
		return statsTotal() >= 10_000
	})
	for i, r := range relays {
		s := r.Stats()
		t.Logf("relay %d published %d rows in %d rounds", i, s.Published, s.Rounds)
	}
	require.EqualValues(t, 10_000, statsTotal(), "rows marked published, over the three relays")
	for _, ev := range events {
		require.Equal(t, 1, b.enq.count(ev.EventID.String()), "enqueue calls for event %s", ev.EventID)
	}
	requireDeliveredOnce(t, b.inspector, b.queue, events)
}

func TestRolledBackEventsNeverReachRedis(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	var rolledBack []*model.Event
	for range 10 {
		ev, err := model.NewEvent("test.rolled_back", map[string]string{"x": "y"}, model.WithQueue(b.queue))
		require.NoError(t, err)
		rolledBack = append(rolledBack, ev)
	}
	errBoom := errors.New("boom")
	err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&rolledBack).Exec(ctx)
		require.NoError(t, err)
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	committed := insertEvents(t, b.db, b.queue, 5)

	r := b.newRelay(t, Config{})
	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 5, res.Claimed)
	require.Equal(t, 5, res.Published)

	requireDeliveredOnce(t, b.inspector, b.queue, committed)
	for _, ev := range rolledBack {
		_, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String())
		require.ErrorIs(t, err, asynq.ErrTaskNotFound)
		require.Zero(t, b.enq.count(ev.EventID.String()))
	}
}

func TestTaskCarriesEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := insertEvents(t, b.db, b.queue, 1)
	r := b.newRelay(t, Config{TaskRetention: time.Hour})
	require.NoError(t, r.rounds.runAll(context.Background()).Err)

	ev := events[0]
	ti, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String())
	require.NoError(t, err)
	require.Equal(t, "test.event", ti.Type)
	require.JSONEq(t, string(ev.Payload), string(ti.Payload))
	require.Equal(t, ev.EventID.String(), ti.Headers[wire.HeaderEventID])
	require.Equal(t, "test.event", ti.Headers[wire.HeaderEventName])
	require.Equal(t, "v", ti.Headers["k"])
	created, err := time.Parse(time.RFC3339Nano, ti.Headers[wire.HeaderCreatedAt])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), created, time.Minute)
	require.Equal(t, time.Hour, ti.Retention)

	// Enqueued again (a crash between enqueue and commit): the TaskID conflict counts as delivered.
	_, err = b.db.NewUpdate().Model((*model.Event)(nil)).Set("published_at = NULL").Where("TRUE").Exec(context.Background())
	require.NoError(t, err)
	res := r.rounds.runAll(context.Background())
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Published)
	require.Equal(t, 2, b.enq.count(ev.EventID.String()))
	requireDeliveredOnce(t, b.inspector, b.queue, events)
}

func TestFailingRowEndsDeadWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	poison := insertEvents(t, b.db, b.queue, 1)[0]
	others := insertEvents(t, b.db, b.queue, 1000)
	errPoison := fmt.Errorf("%w: poison row", ErrTaskRejected) // the task's own: an error of any other kind is an outage
	b.enq.setFail(func(id string) error {
		if id == poison.EventID.String() {
			return errPoison
		}
		return nil
	})
	var dead []DeadEvent
	var mu sync.Mutex
	r := b.newRelay(t, Config{
		MaxAttempts: 3, RetryBackoff: time.Millisecond, RetryBackoffMax: 5 * time.Millisecond,
		BatchSize: 100, PollInterval: 10 * time.Millisecond,
		Observer: Observer{OnDead: func(_ context.Context, ev DeadEvent) {
			mu.Lock()
			defer mu.Unlock()
			dead = append(dead, ev)
		}},
	})
	run(t, r)
	outboxtest.WaitFor(t, time.Minute, "the 1000 others published and the poison row dead", func() bool {
		return published(t, b.db) == 1000 && outboxtest.Count(t, b.db, "outbox_events", "dead_at IS NOT NULL") == 1
	})
	require.Equal(t, 3, b.enq.count(poison.EventID.String()), "attempts on the poison row")
	requireDeliveredOnce(t, b.inspector, b.queue, others)

	var row model.Event
	require.NoError(t, b.db.NewSelect().Model(&row).Where("event_id = ?", poison.EventID).Scan(context.Background()))
	require.Equal(t, 3, row.Attempts)
	require.Contains(t, row.LastError, "poison row")
	require.NotNil(t, row.DeadAt)
	require.Nil(t, row.PublishedAt)
	// OnDead is called after the round's commit, so it may trail the row; and no assertion runs while mu is
	// held, or a failure would leave the hook, and so the relay's stop, waiting on it.
	deadEvents := func() []DeadEvent {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(dead)
	}
	outboxtest.WaitFor(t, 10*time.Second, "OnDead called for the poison row", func() bool { return len(deadEvents()) >= 1 })
	got := deadEvents()
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0].Err, errPoison)
	require.Len(t, b.logs.matching("event is dead"), 1)
	require.EqualValues(t, 1, r.Stats().Dead)

	// The operator lists it and, once the cause is fixed, retries it.
	listed, err := adminOf(t, b.db).ListDead(context.Background(), 0)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, poison.EventID, listed[0].EventID)
	b.enq.setFail(nil)
	n, err := adminOf(t, b.db).RetryDead(context.Background(), poison.EventID)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	outboxtest.WaitFor(t, 30*time.Second, "the revived row published", func() bool { return published(t, b.db) == 1001 })
	requireDeliveredOnce(t, b.inspector, b.queue, append(others, poison))
}

func TestShutdownUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := insertEvents(t, b.db, b.queue, 5000)

	ctx, cancel := context.WithCancel(context.Background())
	b.enq.before = func(n int) {
		if n == 1234 { // in the middle of a batch
			cancel()
		}
	}
	r := b.newRelay(t, Config{BatchSize: 500, Concurrency: 8})
	require.NoError(t, r.Run(ctx))

	// Nothing was marked without reaching Redis, and nothing is left locked.
	ids := outboxtest.DeliveredIDs(t, b.db)
	require.NotEmpty(t, ids)
	require.Less(t, len(ids), 5000)
	for _, id := range ids {
		require.Equal(t, 1, b.enq.count(id))
	}
	locked := outboxtest.Count(t, b.db, "outbox_events", "id IN (SELECT id FROM outbox_events FOR UPDATE SKIP LOCKED)")
	require.EqualValues(t, 5000, locked, "rows lockable after shutdown")

	b.enq.before = nil
	r2 := b.newRelay(t, Config{})
	run(t, r2)
	outboxtest.WaitFor(t, time.Minute, "all rows published", func() bool { return published(t, b.db) == 5000 })
	requireDeliveredOnce(t, b.inspector, b.queue, events)
}

func TestRunTwiceAndStartStopStress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newRelay(t, Config{})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	outboxtest.WaitFor(t, 10*time.Second, "the relay running", r.running.Load)
	require.ErrorIs(t, r.Run(context.Background()), ErrRunning)
	cancel()
	require.NoError(t, <-done)

	insertEvents(t, b.db, b.queue, 200)
	var wg sync.WaitGroup
	var stops atomic.Int64
	for range 4 {
		wg.Go(func() {
			for range 10 {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- r.Run(ctx) }()
				cancel()
				err := <-done
				if err == nil {
					stops.Add(1)
				} else {
					require.ErrorIs(t, err, ErrRunning)
				}
			}
		})
	}
	wg.Wait()
	require.Positive(t, stops.Load())
	run(t, r)
	outboxtest.WaitFor(t, 30*time.Second, "rows published", func() bool { return published(t, b.db) == 200 })
}

func TestNewChecksItsDependencies(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		db := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
		_, err := New(db, b.redis, Config{})
		require.ErrorIs(t, err, ErrNoSchema)
		require.ErrorContains(t, err, "bunbox migrate up")
	})
	t.Run("RedisUnreachable", func(t *testing.T) {
		t.Parallel()
		_, err := New(b.db, asynq.RedisClientOpt{Addr: "127.0.0.1:1", DialTimeout: time.Second}, Config{})
		require.ErrorContains(t, err, "Redis does not answer")
	})
	t.Run("BadRedisAddress", func(t *testing.T) {
		t.Parallel()
		_, err := New(b.db, asynq.RedisClientOpt{Addr: "not an address"}, Config{})
		require.Error(t, err)
	})
	t.Run("NoRedis", func(t *testing.T) {
		t.Parallel()
		_, err := New(b.db, nil, Config{})
		require.ErrorContains(t, err, "Enqueuer")
	})
	t.Run("InvalidConfig", func(t *testing.T) {
		t.Parallel()
		_, err := New(b.db, b.redis, Config{BatchSize: -1})
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.ErrorContains(t, err, "BatchSize")
	})
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		r, err := New(b.db, b.redis, Config{})
		require.NoError(t, err)
		require.NoError(t, r.Close())
	})
}

func TestIdleRelayWakesOnNotify(t *testing.T) {
	t.Parallel()
	outboxtest.SkipPooled(t, "the relay does not LISTEN through a transaction pooler (TestListenOnlyWhenDirect covers it)")
	b := setup(t)
	require.NoError(t, EnableNotifyTrigger(context.Background(), b.db, model.Location{}))
	// A poll interval far beyond the wait below: only the notification can explain a quick delivery.
	r := b.newRelay(t, Config{PollInterval: time.Hour, MinPollInterval: time.Hour})
	run(t, r)
	outboxtest.WaitFor(t, 10*time.Second, "the listener confirmed", func() bool {
		return len(b.logs.matching("listening for notifications")) == 1
	})
	for i := range 3 {
		insertEvents(t, b.db, b.queue, 1)
		outboxtest.WaitFor(t, 10*time.Second, "the event relayed after its NOTIFY", func() bool {
			return published(t, b.db) == int64(i+1)
		})
	}
	require.NoError(t, DisableNotifyTrigger(context.Background(), b.db, model.Location{}))
}

func TestCleanupDeletesExpiredPublishedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insertEvents(t, b.db, b.queue, 30)
	_, err := b.db.ExecContext(ctx, `UPDATE outbox_events SET published_at = now() - interval '2 hours' WHERE id <= (SELECT min(id) + 24 FROM outbox_events)`)
	require.NoError(t, err)
	_, err = b.db.ExecContext(ctx, `UPDATE outbox_events SET published_at = now() WHERE id = (SELECT max(id) FROM outbox_events)`)
	require.NoError(t, err)

	r := b.newRelay(t, Config{PublishedRetention: time.Hour, CleanupBatchSize: 10})
	n, err := r.cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 25, n)
	require.EqualValues(t, 5, outboxtest.Count(t, b.db, "outbox_events", ""))
	require.EqualValues(t, 25, r.Stats().Cleaned)
}

func TestReadBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bl, err := adminOf(t, b.db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.Equal(t, admin.Backlog{}, bl)

	insertEvents(t, b.db, b.queue, 3)
	_, err = b.db.ExecContext(ctx, `UPDATE outbox_events SET published_at = NULL, dead_at = now(), created_at = created_at - interval '1 hour' WHERE id = (SELECT max(id) FROM outbox_events)`)
	require.NoError(t, err)
	_, err = b.db.ExecContext(ctx, `UPDATE outbox_events SET created_at = now() - interval '1 minute' WHERE id = (SELECT min(id) FROM outbox_events)`)
	require.NoError(t, err)
	bl, err = adminOf(t, b.db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, bl.Pending)
	require.EqualValues(t, 1, bl.Dead)
	require.InDelta(t, time.Minute.Seconds(), bl.Lag.Seconds(), 10)
}

// A row whose metadata cannot become task headers (written around bunx, by hand) is dead at once, with an
// error that names the column, and the rows around it are delivered.
func TestMalformedRowDeadAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := insertEvents(t, b.db, b.queue, 10)
	_, err := b.db.ExecContext(context.Background(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, metadata)
VALUES (gen_random_uuid(), 'test.event', ?, '{}', '{"tenant": 7}')`, b.queue)
	require.NoError(t, err)
	after := insertEvents(t, b.db, b.queue, 10)

	r := b.newRelay(t, Config{MaxAttempts: 5})
	res := r.rounds.runAll(context.Background())
	require.NoError(t, res.Err)
	require.Equal(t, 20, res.Published)
	require.Equal(t, 1, res.Dead)
	requireDeliveredOnce(t, b.inspector, b.queue, append(before, after...))

	var attempts int
	var lastError string
	var pending bool
	require.NoError(t, b.db.QueryRowContext(context.Background(), `SELECT attempts, last_error, published_at IS NULL
FROM outbox_events WHERE dead_at IS NOT NULL`).Scan(&attempts, &lastError, &pending))
	require.Equal(t, 1, attempts)
	require.Contains(t, lastError, "column metadata")
	require.True(t, pending)
}
