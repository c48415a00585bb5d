package relay_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// reconcileBundle: a fresh schema on the shared PostgreSQL, a private Redis without persistence (a
// restart loses everything, like a failover to an empty replica), a queue, and an inspector.
type reconcileBundle struct {
	db        *bun.DB
	redis     *outboxtest.Redis
	opt       asynq.RedisClientOpt
	queue     string
	inspector *asynq.Inspector
}

func setupReconcile(t *testing.T) *reconcileBundle {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	b := &reconcileBundle{db: db, redis: rd, opt: asynq.RedisClientOpt{Addr: rd.Addr()}, queue: "reconcile"}
	b.inspector = asynq.NewInspector(b.opt)
	t.Cleanup(func() { _ = b.inspector.Close() })
	return b
}

// relayAll runs a relay until every row is published, then stops it.
func (b *reconcileBundle) relayAll(t *testing.T) { t.Helper(); b.relayAllRoutes(t, nil) }

func (b *reconcileBundle) relayAllRoutes(t *testing.T, routes fanout.Routes) {
	t.Helper()
	b.relayWhere(t, routes, "")
}

// relayWhere runs a relay until no row that meets where ("" for all) waits for delivery.
func (b *reconcileBundle) relayWhere(t *testing.T, routes fanout.Routes, where string) {
	t.Helper()
	r, err := relay.New(b.db, b.opt, relay.Config{PollInterval: 20 * time.Millisecond, RoundBackoff: 10 * time.Millisecond,
		DisableNotify: true, DisableReconciler: true, Logger: outboxtest.Logger(t), Routes: routes})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	outboxtest.WaitFor(t, 30*time.Second, "every row published", func() bool {
		return outboxtest.CountUndelivered(t, b.db, where) == 0
	})
	cancel()
	require.NoError(t, <-done)
}

func (b *reconcileBundle) insert(t *testing.T, n int) []*model.Event {
	t.Helper()
	events := make([]*model.Event, n)
	for i := range events {
		ev, err := model.NewEvent("reconcile.test", map[string]int{"n": i}, model.WithQueue(b.queue))
		require.NoError(t, err)
		events[i] = ev
	}
	_, err := b.db.NewInsert().Model(&events).Exec(context.Background())
	require.NoError(t, err)
	return events
}

func (b *reconcileBundle) requireTasks(t *testing.T, events []*model.Event) {
	t.Helper()
	for _, ev := range events {
		_, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String())
		require.NoError(t, err, "task of event %s", ev.EventID)
	}
}

func newReconciler(t *testing.T, b *reconcileBundle, cfg relay.ReconcilerConfig) *relay.Reconciler {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = outboxtest.Logger(t)
	}
	rc, err := relay.NewReconciler(b.db, b.opt, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

func TestReconcilerRedeliversTasksLostWithRedis(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	events := b.insert(t, 120)
	b.relayAll(t)
	b.requireTasks(t, events)

	// BatchSize 7: the pass pages through the rows.
	rc := newReconciler(t, b, relay.ReconcilerConfig{BatchSize: 7})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 120, res.Checked)
	require.Zero(t, res.Missing)
	require.Positive(t, res.Duration)

	// Redis restarts empty: every acknowledged task is gone, although the rows say published.
	b.redis.Stop(t)
	b.redis.Start(t)
	_, err = b.inspector.GetTaskInfo(b.queue, events[0].EventID.String())
	require.ErrorIs(t, err, asynq.ErrQueueNotFound)

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	missing := make([]relay.MissingTask, len(events))
	for i, ev := range events {
		missing[i] = relay.MissingTask{EventID: ev.EventID, Queue: b.queue}
	}
	require.ElementsMatch(t, missing, res.MissingTasks, "every lost event named")
	require.Equal(t, relay.ReconcileResult{Checked: 120, Missing: 120, Requeued: 120, Swept: true,
		LostQueues: []string{b.queue}, MissingTasks: res.MissingTasks, Duration: res.Duration}, res)
	require.EqualValues(t, 120, outboxtest.CountUndelivered(t, b.db, "last_error LIKE '%reconciler%'"))

	b.relayAll(t)
	b.requireTasks(t, events)
	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, 120, info.Size)

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 120, res.Checked)
	require.Zero(t, res.Missing)
}

// asynq's Client registers a queue in Redis (the set the Inspector looks queues up in) only at its first
// enqueue into it, and remembers that it did. After Redis lost its data, a relay that kept running
// re-creates the tasks without registering the queue again, so the Inspector answers ErrQueueNotFound
// for tasks that exist. The reconciler must not take them for lost (and requeue them at every pass).
func TestReconcilerAfterRedisLossWithALongLivedRelay(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	r, err := relay.New(b.db, b.opt, relay.Config{PollInterval: 20 * time.Millisecond, RoundBackoff: 10 * time.Millisecond,
		RoundBackoffMax: 50 * time.Millisecond, DisableNotify: true, Logger: outboxtest.Logger(t),
		// The reconciler under test is the one below; the relay's own would requeue the lost tasks first, which
		// registers the queue again and takes away the state this test is about.
		DisableReconciler: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	pending := func() int64 { return outboxtest.CountUndelivered(t, b.db, "") }

	lost := b.insert(t, 30)
	outboxtest.WaitFor(t, 30*time.Second, "every row published", func() bool { return pending() == 0 })
	b.redis.Stop(t)
	b.redis.Start(t)
	fresh := b.insert(t, 10)
	outboxtest.WaitFor(t, 30*time.Second, "the new rows published", func() bool { return pending() == 0 })
	_, err = b.inspector.GetTaskInfo(b.queue, fresh[0].EventID.String())
	require.ErrorIs(t, err, asynq.ErrQueueNotFound, "asynq's behaviour this test is about: the task exists, the queue is unknown")

	rc := newReconciler(t, b, relay.ReconcilerConfig{})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 40, res.Checked)
	require.Equal(t, 30, res.Missing, "only the tasks lost with Redis")
	require.Equal(t, 30, res.Requeued)
	outboxtest.WaitFor(t, 30*time.Second, "every row published again", func() bool { return pending() == 0 })

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	// The rows published since the first pass began: the requeued ones, and the fresh ones too when a
	// transaction of another test in the shared database was open then (it holds the cursor back).
	require.GreaterOrEqual(t, res.Checked, 30)
	require.LessOrEqual(t, res.Checked, 40)
	require.Zero(t, res.Missing)
	b.requireTasks(t, append(lost, fresh...)) // the queue is registered again
	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, 40, info.Size, "no probe task left behind")
}

func TestReconcilerFindsSingleLostTasks(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	events := b.insert(t, 20)
	b.relayAll(t)

	// Tasks in other states are not missing: archived, completed (kept for Retention), deleted ones are.
	require.NoError(t, b.inspector.ArchiveTask(b.queue, events[0].EventID.String()))
	require.NoError(t, b.inspector.DeleteTask(b.queue, events[1].EventID.String()))
	require.NoError(t, b.inspector.DeleteTask(b.queue, events[2].EventID.String()))
	srv := asynq.NewServer(b.opt, asynq.Config{Queues: map[string]int{b.queue: 1}, Concurrency: 2,
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
	outboxtest.WaitFor(t, 30*time.Second, "the tasks completed", func() bool {
		info, err := b.inspector.GetQueueInfo(b.queue)
		return err == nil && info.Completed == 17
	})
	srv.Shutdown()

	// A row published before the window is not looked at.
	old := b.insert(t, 1)
	_, err := b.db.NewRaw("UPDATE outbox_events SET published_at = now() - interval '2 hours' WHERE event_id = ?",
		old[0].EventID).Exec(ctx)
	require.NoError(t, err)

	rc := newReconciler(t, b, relay.ReconcilerConfig{Window: time.Hour})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 20, res.Checked)
	require.Equal(t, 2, res.Missing)
	require.Equal(t, 2, res.Requeued)
	var requeued []string
	require.NoError(t, b.db.NewRaw("SELECT event_id::text FROM outbox_events WHERE published_at IS NULL ORDER BY id").
		Scan(ctx, &requeued))
	require.Equal(t, []string{events[1].EventID.String(), events[2].EventID.String()}, requeued)

	b.relayAll(t)
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Missing)
}

func TestReconcilerChecksEveryListenerOfAFanOut(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	routes := fanout.Routes{"reconcile.test": {"mail", "stock"}}
	events := b.insert(t, 10)
	b.relayAllRoutes(t, routes)
	requireListenerTasks := func() {
		t.Helper()
		for _, ev := range events {
			for _, l := range routes["reconcile.test"] {
				_, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String()+":"+l)
				require.NoError(t, err, "task of event %s for %s", ev.EventID, l)
			}
		}
	}
	requireListenerTasks()

	rc := newReconciler(t, b, relay.ReconcilerConfig{Routes: routes, BatchSize: 3})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, res.Checked)
	require.Zero(t, res.Missing)

	// One listener's task of one event is gone: the row is requeued, the relay re-enqueues both
	// listeners, and the one still there is a conflict. A task deleted by hand is no data loss that the
	// markers see: a sweep finds it.
	require.NoError(t, b.inspector.DeleteTask(b.queue, events[3].EventID.String()+":stock"))
	res, err = rc.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Missing)
	require.Equal(t, 1, res.Requeued)
	b.relayAllRoutes(t, routes)
	requireListenerTasks()

	// Everything lost with Redis.
	b.redis.Stop(t)
	b.redis.Start(t)
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, res.Requeued)
	b.relayAllRoutes(t, routes)
	requireListenerTasks()
	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, 20, info.Size)

	// A reconciler that does not know the Routes looks for tasks the relay never made.
	blind := newReconciler(t, b, relay.ReconcilerConfig{})
	res, err = blind.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, res.Missing)

	_, err = relay.NewReconciler(b.db, b.opt, relay.ReconcilerConfig{Routes: fanout.Routes{"x": {"a", "a"}}})
	require.ErrorIs(t, err, relay.ErrInvalidConfig)
	require.ErrorContains(t, err, "Routes")
}

// inspectorFunc adapts a function to relay.Inspector.
type inspectorFunc func(queue, id string) (*asynq.TaskInfo, error)

func (f inspectorFunc) GetTaskInfo(queue, id string) (*asynq.TaskInfo, error) { return f(queue, id) }

// DeleteTask is not used by the Reconciler.
func (f inspectorFunc) DeleteTask(string, string) error {
	return errors.New("inspectorFunc: DeleteTask is not for the reconciler")
}

func TestReconcilerRequeuesOnlyUnchangedRows(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	events := b.insert(t, 5)
	b.relayAll(t)

	// While this pass looks events[0] up, another reconciler requeues it and a relay publishes it again:
	// its published_at moves, so this pass's stale verdict must not requeue it a second time.
	ins := inspectorFunc(func(queue, id string) (*asynq.TaskInfo, error) {
		if id == events[0].EventID.String() {
			_, err := b.db.NewRaw("UPDATE outbox_events SET published_at = clock_timestamp() WHERE event_id = ?",
				events[0].EventID).Exec(ctx)
			require.NoError(t, err)
		}
		return nil, fmt.Errorf("asynq: %w", asynq.ErrTaskNotFound)
	})
	rc, err := relay.NewReconciler(b.db, nil, relay.ReconcilerConfig{Inspector: ins, Concurrency: 1, Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, res.Checked)
	require.Equal(t, 5, res.Missing)
	require.Equal(t, 4, res.Requeued)
	require.EqualValues(t, 1, outboxtest.CountDelivered(t, b.db, "event_id = ?", events[0].EventID))
}

// A relay stamps the rows it publishes with the start of its transaction. A round that began before a
// sweep and claims a row the sweep requeued stamps it within the sweep's range, after the pages already
// read: the sweep meets the row again, and must not look it up (nor requeue it) a second time.
func TestReconcilerLooksARequeuedRowUpOnce(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	// Rows of the per-row path: a requeued streamed row comes back as one, after the sweep read those.
	require.NoError(t, relay.DisableStream(ctx, b.db, model.Location{}))
	events := b.insert(t, 30)
	b.relayAll(t)
	victim := events[0]
	require.NoError(t, b.inspector.DeleteTask(b.queue, victim.EventID.String()))

	// The relay's round: its transaction begins before the sweep.
	round, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = round.Rollback() }()
	_, err = round.ExecContext(ctx, "SELECT now()")
	require.NoError(t, err)

	var mu sync.Mutex
	lookups := map[string]int{}
	ins := inspectorFunc(func(queue, id string) (*asynq.TaskInfo, error) {
		mu.Lock()
		lookups[id]++
		n := 0
		for _, c := range lookups {
			n += c
		}
		mu.Unlock()
		if n == 11 { // the first page's rows were looked up and its missing row requeued: the round claims it
			res, err := round.NewRaw("UPDATE outbox_events SET published_at = now() WHERE event_id = ? AND published_at IS NULL",
				victim.EventID).Exec(ctx)
			require.NoError(t, err)
			affected, err := res.RowsAffected()
			require.NoError(t, err)
			require.EqualValues(t, 1, affected, "the sweep requeued the victim with its first page")
			require.NoError(t, round.Commit())
		}
		t.Logf("lookup %d %s victim=%v", n, id, id == victim.EventID.String())
		return b.inspector.GetTaskInfo(queue, id)
	})
	rc, err := relay.NewReconciler(b.db, nil, relay.ReconcilerConfig{Inspector: ins, Concurrency: 1, BatchSize: 10,
		Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close() })
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 30, res.Checked)
	require.Equal(t, 1, res.Missing)
	require.Equal(t, 1, res.Requeued)
	require.Equal(t, 1, lookups[victim.EventID.String()])
	require.EqualValues(t, 1, outboxtest.CountDelivered(t, b.db, "event_id = ? AND published_at IS NOT NULL", victim.EventID))
}

// flakyInspector answers from a real inspector until fail is set.
type flakyInspector struct {
	real *asynq.Inspector
	mu   sync.Mutex
	fail error
	seen int
}

func (f *flakyInspector) GetTaskInfo(queue, id string) (*asynq.TaskInfo, error) {
	f.mu.Lock()
	f.seen++
	err := f.fail
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.real.GetTaskInfo(queue, id)
}

func (f *flakyInspector) DeleteTask(queue, id string) error { return f.real.DeleteTask(queue, id) }

func TestReconcilerNeverRequeuesOnLookupErrors(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	b.insert(t, 30)
	b.relayAll(t)

	t.Run("RedisDown", func(t *testing.T) {
		// Concurrency 1: the first failed look-up ends the pass, and go-redis does not start its
		// background re-dialer (which would outlive the test by a second) for a handful of failed dials.
		rc := newReconciler(t, b, relay.ReconcilerConfig{BatchSize: 10, Concurrency: 1})
		b.redis.Stop(t)
		defer b.redis.Start(t) // empty again: the next subtest works on an empty Redis, which is fine
		res, err := rc.ReconcileOnce(ctx)
		require.Error(t, err)
		require.ErrorContains(t, err, "Redis")
		require.Zero(t, res.Requeued)
		require.Zero(t, outboxtest.CountUndelivered(t, b.db, ""))
	})
	t.Run("InspectorError", func(t *testing.T) {
		f := &flakyInspector{real: b.inspector, fail: errors.New("i/o timeout")}
		rc, err := relay.NewReconciler(b.db, nil, relay.ReconcilerConfig{Inspector: f, Logger: outboxtest.Logger(t)})
		require.NoError(t, err)
		res, err := rc.ReconcileOnce(ctx)
		require.ErrorContains(t, err, "i/o timeout")
		require.Zero(t, res.Missing)
		require.Zero(t, outboxtest.CountUndelivered(t, b.db, ""))
		require.NoError(t, rc.Close())
	})
}

func TestReconcilerRun(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	events := b.insert(t, 10)
	b.relayAll(t)
	rc := newReconciler(t, b, relay.ReconcilerConfig{Interval: 20 * time.Millisecond})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rc.Run(ctx) }()
	b.redis.Stop(t)
	b.redis.Start(t)
	outboxtest.WaitFor(t, 30*time.Second, "the lost tasks requeued", func() bool {
		return outboxtest.CountUndelivered(t, b.db, "") == 10
	})
	require.ErrorIs(t, rc.Run(ctx), relay.ErrRunning)
	cancel()
	require.NoError(t, <-done)

	b.relayAll(t)
	b.requireTasks(t, events)
}

func TestReconcilerConfig(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	opt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}

	for _, tt := range []struct {
		name  string
		cfg   relay.ReconcilerConfig
		field string
	}{
		{"WindowNotShorterThanRetention", relay.ReconcilerConfig{Window: 24 * time.Hour}, "Window must be shorter than TaskRetention"},
		{"WindowVersusCustomRetention", relay.ReconcilerConfig{Window: 2 * time.Hour, TaskRetention: time.Hour}, "Window"},
		{"NegativeWindow", relay.ReconcilerConfig{Window: -time.Second}, "Window must be positive"},
		{"NegativeInterval", relay.ReconcilerConfig{Interval: -time.Second}, "Interval"},
		{"BatchSize", relay.ReconcilerConfig{BatchSize: 10001}, "BatchSize"},
		{"Concurrency", relay.ReconcilerConfig{Concurrency: -1}, "Concurrency"},
		{"TaskRetention", relay.ReconcilerConfig{TaskRetention: time.Millisecond}, "TaskRetention"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := relay.NewReconciler(db, opt, tt.cfg)
			require.ErrorIs(t, err, relay.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.field)
		})
	}
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		rc, err := relay.NewReconciler(db, opt, relay.ReconcilerConfig{})
		require.NoError(t, err)
		require.NoError(t, rc.Close())
	})
	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		empty := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
		_, err := relay.NewReconciler(empty, opt, relay.ReconcilerConfig{})
		require.ErrorIs(t, err, relay.ErrNoSchema)
		require.ErrorContains(t, err, "bunbox migrate up")
	})
	t.Run("RedisUnreachable", func(t *testing.T) {
		t.Parallel()
		_, err := relay.NewReconciler(db, asynq.RedisClientOpt{Addr: "127.0.0.1:1", DialTimeout: time.Second}, relay.ReconcilerConfig{})
		require.ErrorContains(t, err, "Redis does not answer")
	})
	t.Run("NoRedis", func(t *testing.T) {
		t.Parallel()
		_, err := relay.NewReconciler(db, nil, relay.ReconcilerConfig{})
		require.ErrorContains(t, err, "Inspector")
	})
	t.Run("NilDB", func(t *testing.T) {
		t.Parallel()
		_, err := relay.NewReconciler(nil, opt, relay.ReconcilerConfig{})
		require.ErrorContains(t, err, "db is nil")
	})
}

// The reconciler runs next to the relays (one per relay, or one per deployment): every Interval it looks
// up the tasks of the rows published within Window and puts back in line those Redis lost.
func ExampleNewReconciler() {
	ctx, cancel := context.WithCancel(context.Background())
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{}) // bunbox's schema applied
	if err != nil {
		panic(err)
	}
	defer db.Close()
	redis, err := connect.Redis(os.Getenv("REDIS_URL"))
	if err != nil {
		panic(err)
	}
	rc, err := relay.NewReconciler(db, redis, relay.ReconcilerConfig{
		Window:        time.Hour,      // must be shorter than TaskRetention
		Interval:      time.Minute,    // a lost task is re-delivered within about a minute
		TaskRetention: 24 * time.Hour, // the relay's Config.TaskRetention
	})
	if err != nil {
		panic(err) // Redis or PostgreSQL unreachable, the schema missing, or an invalid setting
	}
	defer rc.Close()
	stopped := make(chan error, 1)
	go func() { stopped <- rc.Run(ctx) }() // returns nil when ctx is done

	res, err := rc.ReconcileOnce(ctx) // or one pass on demand, e.g. right after a Redis failover
	fmt.Println(res.Missing, res.Requeued, err)

	cancel() // the service shuts down
	fmt.Println(<-stopped)
	// Output:
	// 0 0 <nil>
	// <nil>
}
