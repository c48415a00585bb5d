package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/relay"
)

// The drain part: a backlog of n committed events, moved from PostgreSQL into asynq (the same tasks: type,
// payload, headers, TaskID, queue and retention of the relay's task for such an event) by each arm, with 32 enqueues in flight.

const drainConcurrency = 32

var drainPayload = []byte(`{"order_id":12345,"total":"99.90"}`)

// drainArm moves a backlog of n events into asynq queue q and returns the events per second (done/elapsed
// when it hit the cap) and whether it was capped.
type drainArm struct {
	name  string
	note  string
	run   func(ctx context.Context, e *env, n int, cap time.Duration) (rate float64, capped bool, err error)
	extra bool // a variant that a -quick run skips unless -arms names it
}

// benchTask is the task a relay of default Config enqueues for a plain event (no metadata, no delivery
// options) of id in queue: type = event name, the bunbox headers, TaskID = the event id, the queue and the
// default TaskRetention.
func benchTask(id uuid.UUID, queue string) (*asynq.Task, []asynq.Option) {
	return benchTaskOf(id, queue, drainPayload)
}

// taskRetention is relay.Config.TaskRetention's default, which the relay's tasks carry.
const taskRetention = 24 * time.Hour

// benchTaskOf is benchTask with the row's own payload.
func benchTaskOf(id uuid.UUID, queue string, payload []byte) (*asynq.Task, []asynq.Option) {
	headers := map[string]string{
		wire.HeaderEventID:   id.String(),
		wire.HeaderEventName: "bench.event",
		wire.HeaderCreatedAt: time.Now().UTC().Format(time.RFC3339Nano),
	}
	return asynq.NewTaskWithHeaders("bench.event", payload, headers),
		[]asynq.Option{asynq.TaskID(id.String()), asynq.Queue(queue), asynq.Retention(taskRetention)}
}

// checkpointBacklog is whether a backlog is checkpointed before its drain: off in a -quick run, whose
// WAL figures are then not comparable, to keep the smoke run short.
var checkpointBacklog = true

func vacuumAndCheckpoint(ctx context.Context, db *bun.DB, table string) error {
	if !checkpointBacklog {
		return execAll(ctx, db, "VACUUM ANALYZE "+table)
	}
	return execAll(ctx, db, "VACUUM ANALYZE "+table, "CHECKPOINT")
}

// waitCount waits until count() reaches n or cap passes, and returns the rate from start.
func waitCount(ctx context.Context, start time.Time, n int, cap time.Duration, count func() int64) (float64, bool, error) {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		got := count()
		el := time.Since(start)
		if got >= int64(n) {
			return float64(got) / el.Seconds(), false, nil
		}
		if el > cap {
			return float64(got) / el.Seconds(), true, nil
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-t.C:
		}
	}
}

// relayDrain drains with relay.New(db) and measures the drain with p (nil measures nothing).
func relayDrain(ctx context.Context, db *bun.DB, redis asynq.RedisClientOpt, n int, cap time.Duration, p *probe) (float64, bool, error) {
	return relayDrainConfig(ctx, db, redis, relay.Config{}, n, cap, p)
}

// relayDrainConfig is relayDrain with cfg (NOTIFY and the cleanup of published rows are turned off in it).
func relayDrainConfig(ctx context.Context, db *bun.DB, redis asynq.RedisClientOpt, cfg relay.Config, n int, cap time.Duration, p *probe) (float64, bool, error) {
	cfg.DisableNotify, cfg.PublishedRetention = true, -1
	r, err := relay.New(db, redis, cfg)
	if err != nil {
		return 0, false, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan error, 1)
	if err := p.begin(ctx); err != nil {
		_ = r.Close()
		return 0, false, err
	}
	start := time.Now()
	go func() { stopped <- r.Run(runCtx) }()
	rate, capped, err := waitCount(ctx, start, n, cap, func() int64 { return relayDelivered(r) })
	if perr := p.end(ctx); err == nil {
		err = perr
	}
	cancel()
	select {
	case rerr := <-stopped:
		if err == nil {
			err = rerr
		}
	case <-time.After(relayStopWait):
		// Not closed: Close would wait for the same Run. The run ends with this error.
		return 0, false, fmt.Errorf("the relay's Run did not return within %s of its context's end (%d of %d events delivered)",
			relayStopWait, relayDelivered(r), n)
	}
	_ = r.Close()
	return rate, capped, err
}

// relayStopWait bounds how long relayDrain waits for the relay's Run to return once the drain is over.
const relayStopWait = 30 * time.Second

// relayDelivered is how many rows relay r delivered: those it marked published and those it streamed.
func relayDelivered(r *relay.Relay) int64 { return r.Stats().Published }

// drainAsynq is the ceiling: bare asynq.Client enqueues of the same tasks from 32 goroutines.
func drainAsynq(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	return drainAsynqOf(ctx, e, "asynq", n, cap, benchTask)
}

// drainAsynqPlain is the enqueue a user writes by hand: asynq.NewTask(type, payload) with a TaskID (and
// the run's queue) only, no headers and no retention, from 32 goroutines.
func drainAsynqPlain(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	return drainAsynqOf(ctx, e, "plain", n, cap, func(id uuid.UUID, queue string) (*asynq.Task, []asynq.Option) {
		return asynq.NewTask("bench.event", drainPayload), []asynq.Option{asynq.TaskID(id.String()), asynq.Queue(queue)}
	})
}

// drainAsynqOf enqueues n tasks made by task into a queue named for name from 32 goroutines.
func drainAsynqOf(ctx context.Context, e *env, name string, n int, cap time.Duration,
	task func(uuid.UUID, string) (*asynq.Task, []asynq.Option),
) (float64, bool, error) {
	q := e.queue(name)
	defer e.dropQueue(q)
	client := asynq.NewClient(e.redis)
	defer client.Close()
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	if err := e.cur.begin(ctx); err != nil {
		return 0, false, err
	}
	start := time.Now()
	for range drainConcurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && time.Since(start) < cap {
				t, opts := task(uuid.Must(uuid.NewV7()), q)
				if _, err := client.EnqueueContext(ctx, t, opts...); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err := e.cur.end(ctx); firstErr == nil {
		firstErr = err
	}
	done := min(next.Load()-drainConcurrency, int64(n))
	return float64(done) / el.Seconds(), done < int64(n), firstErr
}

// drainNaive is the relay a user writes in an afternoon: one loop that locks 500 pending rows with
// FOR UPDATE SKIP LOCKED, enqueues them 32 at a time and marks them published in the same transaction.
func drainNaive(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	db, _, err := e.schema(ctx, 4, true)
	if err != nil {
		return 0, false, err
	}
	q := e.queue("naive")
	defer e.dropQueue(q)
	if err := disableStream(ctx, db); err != nil { // its rows pending rows, as the loop reads them
		return 0, false, err
	}
	if err := fillBacklog(ctx, db, q, n, false); err != nil {
		return 0, false, err
	}
	client := asynq.NewClient(e.redis)
	defer client.Close()
	var done int64
	if err := e.cur.begin(ctx); err != nil {
		return 0, false, err
	}
	start := time.Now()
	for done < int64(n) && time.Since(start) < cap {
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			var rows []struct {
				ID      int64
				EventID uuid.UUID
			}
			if err := tx.NewRaw(`SELECT id, event_id FROM outbox_events WHERE published_at IS NULL
ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`).Scan(ctx, &rows); err != nil {
				return err
			}
			ids := make([]int64, 0, len(rows))
			var mu sync.Mutex
			sem := make(chan struct{}, drainConcurrency)
			var wg sync.WaitGroup
			for _, row := range rows {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					task, opts := benchTask(row.EventID, q)
					if _, err := client.EnqueueContext(ctx, task, opts...); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
						return
					}
					mu.Lock()
					ids = append(ids, row.ID)
					mu.Unlock()
				})
			}
			wg.Wait()
			if len(ids) == 0 {
				return nil
			}
			_, err := tx.NewRaw("UPDATE outbox_events SET published_at = now() WHERE id = ANY(?)", pgArray(ids)).Exec(ctx)
			done += int64(len(ids))
			return err
		})
		if err != nil {
			return 0, false, err
		}
	}
	el := time.Since(start)
	if err := e.cur.end(ctx); err != nil {
		return 0, false, err
	}
	return float64(done) / el.Seconds(), done < int64(n), e.cur.vacuumAfter(ctx, db, "outbox_events")
}

// asynqPublisher is a Watermill publisher into asynq: the Forwarder's destination.
type asynqPublisher struct {
	client *asynq.Client
	queue  string
	sent   atomic.Int64
}

func (p *asynqPublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		id, err := uuid.Parse(m.UUID)
		if err != nil {
			return err
		}
		task, opts := benchTask(id, p.queue)
		if _, err := p.client.EnqueueContext(m.Context(), task, opts...); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
			return err
		}
		p.sent.Add(1)
	}
	return nil
}

func (p *asynqPublisher) Close() error { return nil }

// drainWatermill runs Watermill's Forwarder: enveloped messages in its PostgreSQL table (written by
// forwarder.Publisher over the SQL publisher), read by the SQL subscriber and published into asynq.
func drainWatermill(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	db, _, err := e.schemaPgx(ctx, 8)
	if err != nil {
		return 0, false, err
	}
	q := e.queue("watermill")
	defer e.dropQueue(q)
	logger := watermill.NopLogger{}
	schema := wmsql.DefaultPostgreSQLSchema{}
	sqlPub, err := wmsql.NewPublisher(wmsql.BeginnerFromStdSQL(db.DB), wmsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, logger)
	if err != nil {
		return 0, false, err
	}
	fwdPub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{})
	for i := 0; i < n; i += 1000 {
		msgs := make([]*message.Message, min(1000, n-i))
		for j := range msgs {
			msgs[j] = message.NewMessage(uuid.Must(uuid.NewV7()).String(), drainPayload)
		}
		if err := fwdPub.Publish("bench_event", msgs...); err != nil {
			return 0, false, err
		}
	}
	if _, err := db.ExecContext(ctx, "VACUUM ANALYZE"); err != nil {
		return 0, false, err
	}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db.DB), wmsql.SubscriberConfig{
		SchemaAdapter: schema, OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true,
	}, logger)
	if err != nil {
		return 0, false, err
	}
	client := asynq.NewClient(e.redis)
	defer client.Close()
	out := &asynqPublisher{client: client, queue: q}
	fwd, err := forwarder.NewForwarder(sub, out, logger, forwarder.Config{CloseTimeout: time.Second})
	if err != nil {
		return 0, false, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	if err := e.cur.begin(ctx); err != nil {
		cancel()
		return 0, false, err
	}
	start := time.Now()
	go func() { stopped <- fwd.Run(runCtx) }()
	rate, capped, err := waitCount(ctx, start, n, cap, out.sent.Load)
	if perr := e.cur.end(ctx); err == nil {
		err = perr
	}
	cancel()
	_ = fwd.Close()
	<-stopped
	return rate, capped, err
}

type benchJob struct {
	EventID uuid.UUID `json:"event_id"`
}

func (benchJob) Kind() string { return "bench.event" }

type benchWorker struct {
	river.WorkerDefaults[benchJob]
	client *asynq.Client
	queue  string
	done   atomic.Int64
}

// Work enqueues the event's task: River moves it from PostgreSQL into asynq, as the other arms do.
func (w *benchWorker) Work(ctx context.Context, job *river.Job[benchJob]) error {
	task, opts := benchTask(job.Args.EventID, w.queue)
	if _, err := w.client.EnqueueContext(ctx, task, opts...); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return err
	}
	w.done.Add(1)
	return nil
}

// drainRiver works n River jobs whose worker enqueues the task, with River's defaults or tuned.
func drainRiver(tuned bool) func(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	return func(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
		_, schema, err := e.schema(ctx, 1, false)
		if err != nil {
			return 0, false, err
		}
		pool, err := e.pgxPool(ctx, schema, 20)
		if err != nil {
			return 0, false, err
		}
		migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
		if err != nil {
			return 0, false, err
		}
		if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return 0, false, err
		}
		q := e.queue("river")
		defer e.dropQueue(q)
		client := asynq.NewClient(e.redis)
		defer client.Close()
		w := &benchWorker{client: client, queue: q}
		workers := river.NewWorkers()
		river.AddWorker(workers, w)
		cfg := &river.Config{Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
			Logger: discardLogger()}
		if tuned {
			cfg.Queues[river.QueueDefault] = river.QueueConfig{MaxWorkers: drainConcurrency * 4}
			cfg.FetchCooldown, cfg.FetchPollInterval = time.Millisecond, 50*time.Millisecond
		}
		rc, err := river.NewClient(riverpgxv5.New(pool), cfg)
		if err != nil {
			return 0, false, err
		}
		for i := 0; i < n; i += 1000 {
			params := make([]river.InsertManyParams, min(1000, n-i))
			for j := range params {
				params[j] = river.InsertManyParams{Args: benchJob{EventID: uuid.Must(uuid.NewV7())}}
			}
			if _, err := rc.InsertManyFast(ctx, params); err != nil {
				return 0, false, err
			}
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
			return 0, false, err
		}
		if err := e.cur.begin(ctx); err != nil {
			return 0, false, err
		}
		start := time.Now()
		if err := rc.Start(ctx); err != nil {
			return 0, false, err
		}
		rate, capped, err := waitCount(ctx, start, n, cap, w.done.Load)
		if perr := e.cur.end(ctx); err == nil {
			err = perr
		}
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rc.Stop(stopCtx)
		return rate, capped, err
	}
}

// baseArm reports whether the drain arm is one every round runs, whatever -arms says: the ratios' bases.
func baseArm(name string) bool {
	return name == "bare asynq" || name == "bare asynq, plain tasks" || name == "lean naive relay"
}

func drainArms() []drainArm {
	return []drainArm{
		{"bare asynq", "asynq.Client.EnqueueContext of the same tasks from 32 goroutines: the ceiling", drainAsynq, false},
		{"bare asynq, plain tasks", "asynq.Client.EnqueueContext of asynq.NewTask(type, payload) with a TaskID (and the run's queue) only, from 32 goroutines: the enqueue a user writes by hand", drainAsynqPlain, false},
		{"lean naive relay", "the relay a user writes in an afternoon, on the table they would write: lean_outbox (id bigserial, event_id uuid, payload jsonb, published_at; one partial index on id WHERE published_at IS NULL, no other); one loop: SELECT id, event_id, payload ... LIMIT 500 FOR UPDATE SKIP LOCKED, 32 enqueues in flight, UPDATE ... SET published_at = now() WHERE id = ANY(...), COMMIT (synchronous_commit on)", drainLean, false},
		{"bunbox relay", "relay.New(db, redis, relay.Config{}) on a freshly migrated outbox (2 workers, batches of 1,000, 128 enqueues in flight; NOTIFY off), the stream on as the migrations leave it; the backlog written in transactions of 1,000 events: every row streamed, delivered by the snapshot cursor with no per-row UPDATE; the run fails unless the queue then holds every row once, no streamed row waits and none left the stream", drainRelay(relay.Config{}, true), false},
		{"bunbox per-row", "the same relay and backlog on an outbox where relay.DisableStream was called first: every row a pending row of the per-row path, claimed and marked published by an UPDATE; the run fails unless the queue then holds every row once and every row is marked published", drainRelay(relay.Config{}, false), false},
		{"bunbox relay, 1 worker", "the bunbox relay with relay.Config{Workers: 1}: no second worker polling the per-row path while the first streams", drainRelay(relay.Config{Workers: 1}, true), true},
		{"naive SKIP LOCKED relay", "the lean naive relay's loop on bunbox's table (seven indexes; relay.DisableStream first, so that its rows are pending rows), reading id and event_id only", drainNaive, false},
		{"(a) snapshot cursor, 2 relays", "prototype: rows carry txid xid8 DEFAULT pg_current_xact_id(), one index (txid, id); a relay holding the lease on a one-row cursor reads 500 rows at a time with (txid, id) > cursor AND txid < pg_snapshot_xmin(pg_current_snapshot()), up to two batches ahead, 32 enqueues in flight across batches, and moves the cursor once per batch (synchronous_commit off); no per-row UPDATE; the second relay waits for the lease", drainSnapshot, false},
		{"(b) DELETE + full published log, 2 relays", "prototype: a pending-only table dl_outbox (id bigserial PRIMARY KEY, event_id, payload); each relay claims 500 FOR UPDATE SKIP LOCKED and, while enqueuing (32 in flight over both), deletes the delivered rows 100 at a time and appends them (id, event_id, payload, published_at) to dl_published (no index), in the claim's transaction (synchronous_commit off)", drainDelete(true), true},
		{"(b) DELETE + slim published log, 2 relays", "the same appending (id, event_id, published_at) only: enough to find a lost task, not to enqueue it again", drainDelete(false), true},
		{"(b) DELETE + full published log on bunbox's table, 2 relays", "the full-log loop on bunbox's table (relay.DisableStream first) and claim (seven indexes): the rolling-deploy path, today's relays marking and the next release's deleting in one table under the same row locks", drainDeleteBunbox, true},
		{"Watermill Forwarder", "watermill v1.5 forwarder over watermill-sql v4 (default schema and offsets adapters, batches of 100) into asynq", drainWatermill, false},
		{"River (defaults)", "river v0.51 on pgx: jobs whose worker enqueues the task; MaxWorkers 100, FetchCooldown 100 ms", drainRiver(false), false},
		{"River (tuned)", "the same with MaxWorkers 128, FetchCooldown 1 ms, FetchPollInterval 50 ms", drainRiver(true), false},
	}
}

// drainRound is what one arm did in one round.
type drainRound struct {
	rate          float64
	events        float64 // the backlog, or as many as a capped round moved
	drain, vacuum *cost
}

// drainFigure is a figure per event of a round: the CPU time cpu of the cost which picks, in
// microseconds, or its WAL bytes when cpu is nil; false when the round has no such cost.
func drainFigure(which func(drainRound) *cost, cpu func(*cost) time.Duration) func(drainRound) (float64, bool) {
	return func(r drainRound) (float64, bool) {
		c := which(r)
		if c == nil || r.events == 0 {
			return 0, false
		}
		if cpu == nil {
			return float64(c.wal) / r.events, true
		}
		return float64(cpu(c).Microseconds()) / r.events, true
	}
}

func runDrain(ctx context.Context, e *env, o options) error {
	fmt.Printf("## Drain: a backlog of %d committed events moved into asynq\n\n", o.drainN)
	fmt.Printf("load average at the start: %s\n\n", loadAverage())
	arms := drainArms()
	results := map[string][]drainRound{}
	ratios := map[string][]float64{}
	leanRatios := map[string][]float64{}
	plainRatios := map[string][]float64{}
	cappedAny := map[string]bool{}
	rounds := max(1, min(o.rounds, 3))
	for round := range rounds {
		got := map[string]drainRound{}
		for _, a := range arms {
			if !baseArm(a.name) && (!o.want(a.name) || a.extra && o.quick && o.arms == "") {
				continue
			}
			e.cur = &probe{m: e.meter, name: a.name, round: round}
			rate, capped, err := a.run(ctx, e, o.drainN, o.drainCap)
			if err != nil {
				return fmt.Errorf("%s: %w", a.name, err)
			}
			r := drainRound{rate, float64(o.drainN), e.cur.drain, e.cur.vacuum}
			if capped && r.drain != nil {
				r.events = rate * r.drain.elapsed.Seconds()
			}
			got[a.name] = r
			e.cur = nil
			cappedAny[a.name] = cappedAny[a.name] || capped
		}
		for name, r := range got {
			results[name] = append(results[name], r)
			ratios[name] = append(ratios[name], r.rate/got["bare asynq"].rate)
			leanRatios[name] = append(leanRatios[name], r.rate/got["lean naive relay"].rate)
			plainRatios[name] = append(plainRatios[name], r.rate/got["bare asynq, plain tasks"].rate)
		}
	}
	fmt.Printf("load average at the end: %s\n\n", loadAverage())
	// med is the median over the rounds of f, a figure per event, or "–" when no round has one.
	med := func(rs []drainRound, f func(drainRound) (float64, bool)) string {
		var xs []float64
		for _, r := range rs {
			if x, ok := f(r); ok {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f", median(xs))
	}
	var rows [][]string
	for _, a := range arms {
		rs, ok := results[a.name]
		if !ok {
			continue
		}
		note := ""
		if cappedAny[a.name] {
			note = fmt.Sprintf(" (a round hit the %s cap)", o.drainCap)
		}
		var rates []float64
		for _, r := range rs {
			rates = append(rates, r.rate)
		}
		rows = append(rows, []string{a.name, fmt.Sprintf("%.0f%s", median(rates), note),
			fmt.Sprintf("**%.2f** (%s)", median(plainRatios[a.name]), spread(plainRatios[a.name])),
			fmt.Sprintf("**%.2f** (%s)", median(ratios[a.name]), spread(ratios[a.name])),
			fmt.Sprintf("**%.2f** (%s)", median(leanRatios[a.name]), spread(leanRatios[a.name])),
			med(rs, drainFigure(func(r drainRound) *cost { return r.drain }, func(c *cost) time.Duration { return c.pgCPU })),
			med(rs, drainFigure(func(r drainRound) *cost { return r.drain }, func(c *cost) time.Duration { return c.goCPU })),
			med(rs, drainFigure(func(r drainRound) *cost { return r.drain }, func(c *cost) time.Duration { return c.redisCPU })),
			med(rs, drainFigure(func(r drainRound) *cost { return r.drain }, nil)),
			med(rs, drainFigure(func(r drainRound) *cost { return r.vacuum }, func(c *cost) time.Duration { return c.pgCPU })),
			med(rs, drainFigure(func(r drainRound) *cost { return r.vacuum }, nil)),
		})
	}
	table([]string{"arm", "events/s", "ratio to plain asynq", "ratio to bare asynq (same tasks)", "ratio to lean naive relay", "PostgreSQL CPU µs/event",
		"Go CPU µs/event", "Redis CPU µs/event", "WAL bytes/event", "then VACUUM: PostgreSQL CPU µs/event", "then VACUUM: WAL bytes/event"}, rows)
	fmt.Printf("\nMedians of %d rounds; ratios to bare asynq with plain tasks, with the relay's own tasks (headers, retention), and to the lean naive relay in the same round (min–max in brackets).\n", rounds)
	fmt.Println("CPU per event over the drain alone: Go = this process (getrusage), PostgreSQL = the dev server's postmaster and all its processes (/proc/<pid>/stat, backends and background workers), Redis = the redis-server (/proc); WAL = pg_current_wal_lsn() delta. Each backlog is checkpointed before its drain. The VACUUM columns are a VACUUM of the drained table right after: the cleanup the drain left. A capped round counts the events it moved.")
	for _, a := range arms {
		fmt.Printf("- %s: %s\n", a.name, a.note)
	}
	return nil
}

// pgArray passes ids as a PostgreSQL array literal.
func pgArray(ids []int64) string {
	b, _ := json.Marshal(ids)
	b[0], b[len(b)-1] = '{', '}'
	return string(b)
}
