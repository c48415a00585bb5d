package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/worker"
)

// The end-to-end part: from the commit of a transaction holding one event to the handler that receives
// it, at a fixed rate and at saturation.

// e2eArm starts its pipeline; handled must be called once per delivery with the event's id. produce
// commits one transaction with one event and returns its id.
type e2eArm struct {
	name  string
	note  string
	start func(ctx context.Context, e *env, handled func(id string)) (produce func(ctx context.Context) (string, error), stop func(), err error)
}

func e2eBunbox(cfg asynq.Config) func(ctx context.Context, e *env, handled func(string)) (func(context.Context) (string, error), func(), error) {
	return func(ctx context.Context, e *env, handled func(string)) (func(context.Context) (string, error), func(), error) {
		db, _, err := e.schema(ctx, 20, true)
		if err != nil {
			return nil, nil, err
		}
		q := e.queue("e2e")
		ob := bunx.New(db)
		r, err := relay.New(db, e.redis, relay.Config{PublishedRetention: -1, Logger: discardLogger()})
		if err != nil {
			return nil, nil, err
		}
		cfg.Queues, cfg.LogLevel = map[string]int{q: 1}, asynq.FatalLevel
		srv := asynq.NewServer(e.redis, cfg)
		mux := asynq.NewServeMux()
		mux.HandleFunc("bench.event", func(_ context.Context, t *asynq.Task) error {
			handled(t.Headers()[wire.HeaderEventID])
			return nil
		})
		if err := srv.Start(mux); err != nil {
			return nil, nil, err
		}
		runCtx, cancel := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- r.Run(runCtx) }()
		produce := func(ctx context.Context) (string, error) {
			ev, err := model.NewEvent("bench.event", orderPlaced{OrderID: 1, Ref: "r"}, model.WithQueue(q))
			if err != nil {
				return "", err
			}
			return ev.EventID.String(), db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				return ob.Record(ctx, tx, ev)
			})
		}
		return produce, func() {
			cancel()
			<-stopped
			_ = r.Close()
			srv.Shutdown()
			e.dropQueue(q)
		}, nil
	}
}

type e2eJob struct {
	ID string `json:"id"`
}

func (e2eJob) Kind() string { return "bench.e2e" }

type e2eWorker struct {
	river.WorkerDefaults[e2eJob]
	handled func(string)
}

func (w *e2eWorker) Work(_ context.Context, job *river.Job[e2eJob]) error {
	w.handled(job.Args.ID)
	return nil
}

func e2eRiver(ctx context.Context, e *env, handled func(string)) (func(context.Context) (string, error), func(), error) {
	_, schema, err := e.schema(ctx, 1, false)
	if err != nil {
		return nil, nil, err
	}
	pool, err := e.pgxPool(ctx, schema, 20)
	if err != nil {
		return nil, nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &e2eWorker{handled: handled})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Workers: workers,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}, Logger: discardLogger()})
	if err != nil {
		return nil, nil, err
	}
	if err := rc.Start(ctx); err != nil {
		return nil, nil, err
	}
	produce := func(ctx context.Context) (string, error) {
		id := uuid.Must(uuid.NewV7()).String()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return "", err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
		if _, err := rc.InsertTx(ctx, tx, e2eJob{ID: id}, nil); err != nil {
			return "", err
		}
		return id, tx.Commit(ctx)
	}
	return produce, func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rc.Stop(stopCtx)
	}, nil
}

func e2eWatermill(ctx context.Context, e *env, handled func(string)) (func(context.Context) (string, error), func(), error) {
	db, _, err := e.schemaPgx(ctx, 20)
	if err != nil {
		return nil, nil, err
	}
	logger := watermill.NopLogger{}
	schema := wmsql.DefaultPostgreSQLSchema{}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db.DB), wmsql.SubscriberConfig{
		SchemaAdapter: schema, OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true,
	}, logger)
	if err != nil {
		return nil, nil, err
	}
	subCtx, cancel := context.WithCancel(ctx)
	msgs, err := sub.Subscribe(subCtx, "bench_e2e")
	if err != nil {
		cancel()
		return nil, nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for m := range msgs {
			handled(m.UUID)
			m.Ack()
		}
	})
	produce := func(ctx context.Context) (string, error) {
		id := uuid.Must(uuid.NewV7()).String()
		return id, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			pub, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx.Tx), wmsql.PublisherConfig{SchemaAdapter: schema}, logger)
			if err != nil {
				return err
			}
			return pub.Publish("bench_e2e", message.NewMessage(id, []byte(`{"order_id":1,"ref":"r"}`)))
		})
	}
	return produce, func() {
		cancel()
		_ = sub.Close()
		wg.Wait()
	}, nil
}

func e2eArms() []e2eArm {
	return []e2eArm{
		{"bunbox, asynq server defaults", "relay default Config on a freshly migrated outbox (the stream on; adaptive poll, no NOTIFY trigger); asynq.Server with its defaults (Concurrency one per CPU, TaskCheckInterval 1 s)", e2eBunbox(asynq.Config{})},
		{"bunbox, worker.ServerConfig", "the same with worker.ServerConfig (TaskCheckInterval 10 ms, DelayedTaskCheckInterval 100 ms)", e2eBunbox(worker.ServerConfig(asynq.Config{}))},
		{"bunbox, worker.ServerConfig, Concurrency 32", "the same with 32 handler goroutines instead of asynq's default (one per CPU, 2 here)", e2eBunbox(worker.ServerConfig(asynq.Config{Concurrency: 32}))},
		{"River", "river v0.51 on pgx, InsertTx in the producer's tx, default Config (LISTEN/NOTIFY), MaxWorkers 100", e2eRiver},
		{"Watermill", "watermill-sql v4 publisher in the producer's tx, SQL subscriber with default config (offsets adapter, batches of 100, poll 1 s)", e2eWatermill},
	}
}

type e2eResult struct {
	p50, p99, rate float64
	lost           int
}

// load commits events from producers goroutines for d, each paced at rate/producers per second (rate 0:
// as fast as they can), waits until every committed event was handled (or 60 s), and returns latencies.
func load(ctx context.Context, produce func(context.Context) (string, error), handledAt *sync.Map, producers, rate int, d time.Duration) (e2eResult, error) {
	var committed sync.Map
	var count atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for p := range producers {
		wg.Go(func() {
			for i := 0; ; i++ {
				if rate > 0 {
					at := start.Add(time.Duration(i*producers+p) * time.Second / time.Duration(rate))
					if at.Sub(start) >= d {
						return
					}
					if wait := time.Until(at); wait > 0 {
						time.Sleep(wait) // pacing the load, not waiting for a result
					}
				} else if time.Since(start) >= d {
					return
				}
				id, err := produce(ctx)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				committed.Store(id, time.Now())
				count.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return e2eResult{}, firstErr
	}
	deadline := time.Now().Add(60 * time.Second)
	var lat []float64
	var last time.Time
	for {
		lat, last = lat[:0], time.Time{}
		missing := 0
		committed.Range(func(k, v any) bool {
			h, ok := handledAt.Load(k)
			if !ok {
				missing++
				return true
			}
			ht := h.(time.Time)
			lat = append(lat, max(ht.Sub(v.(time.Time)), 0).Seconds()*1000)
			if ht.After(last) {
				last = ht
			}
			return true
		})
		if missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			if len(lat) == 0 {
				return e2eResult{lost: missing}, ctx.Err()
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
			return e2eResult{p50: q(0.5), p99: q(0.99), rate: float64(len(lat)) / last.Sub(start).Seconds(), lost: missing}, nil
		}
		time.Sleep(20 * time.Millisecond) // polling the handler's record, bounded by deadline
	}
}

func runE2E(ctx context.Context, e *env, o options) error {
	fmt.Printf("## End to end: commit to handler, %d events/s and saturation (8 producers), %s each\n\n", o.rate, o.e2eDur)
	var rows [][]string
	arms := e2eArms()
	for _, a := range arms {
		if !o.want(a.name) {
			continue
		}
		var handledAt sync.Map
		produce, stop, err := a.start(ctx, e, func(id string) { handledAt.LoadOrStore(id, time.Now()) })
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		// Warm up: the connections open and the pipeline runs before the measured load.
		if _, err := load(ctx, produce, &handledAt, 2, 200, time.Second); err != nil {
			stop()
			return fmt.Errorf("%s: %w", a.name, err)
		}
		fixed, err := load(ctx, produce, &handledAt, 2, o.rate, o.e2eDur)
		if err != nil {
			stop()
			return fmt.Errorf("%s: %w", a.name, err)
		}
		sat, err := load(ctx, produce, &handledAt, 8, 0, o.e2eDur)
		stop()
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		lost := ""
		if fixed.lost+sat.lost > 0 {
			lost = fmt.Sprintf(" (%d not handled after 60 s)", fixed.lost+sat.lost)
		}
		rows = append(rows, []string{a.name, fmt.Sprintf("%.1f", fixed.p50), fmt.Sprintf("%.1f", fixed.p99),
			fmt.Sprintf("%.0f%s", sat.rate, lost), fmt.Sprintf("%.0f", sat.p50), fmt.Sprintf("%.0f", sat.p99)})
	}
	table([]string{"arm", fmt.Sprintf("%d/s p50 ms", o.rate), fmt.Sprintf("%d/s p99 ms", o.rate), "saturation events/s handled", "saturation p50 ms", "saturation p99 ms"}, rows)
	fmt.Println("\nOne run each; latency from the producer's commit returning to the handler's call (0 when the handler ran first).")
	for _, a := range arms {
		fmt.Printf("- %s: %s\n", a.name, a.note)
	}
	return nil
}
