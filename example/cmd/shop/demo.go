package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/example/shop"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// demoConfig is the demo's command line.
type demoConfig struct {
	orders    int
	producers int
	rollback  float64
	rate      int
	timeout   time.Duration
	schema    string
	queue     string
	notify    bool
	keep      bool
}

func parseDemoFlags(args []string, stderr io.Writer) (demoConfig, error) {
	var c demoConfig
	fs := flag.NewFlagSet("shop demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.orders, "orders", 3000, "orders to place")
	fs.IntVar(&c.producers, "producers", 8, "goroutines placing orders concurrently")
	fs.Float64Var(&c.rollback, "rollback", 0.1, "fraction of the orders inserted in a transaction that then rolls back on purpose")
	fs.IntVar(&c.rate, "rate", 500, "orders per second over all producers (0: as fast as they go; latency then measures the queue)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "how long to wait for every committed order to be confirmed")
	fs.StringVar(&c.schema, "schema", "bunbox_demo", "PostgreSQL schema the demo creates afresh (dropped at the end unless -keep)")
	fs.StringVar(&c.queue, "queue", "bunbox_demo", "asynq queue the demo uses (deleted at the start and at the end)")
	fs.BoolVar(&c.notify, "notify", true, "install the outbox NOTIFY trigger so the idle relay wakes at once")
	fs.BoolVar(&c.keep, "keep", false, "keep the schema at the end, to look at the rows")
	if err := parseFlags(fs, args); err != nil {
		return c, err
	}
	switch {
	case c.orders < 1 || c.orders > 1_000_000:
		return c, fmt.Errorf("-orders must be between 1 and 1000000")
	case c.producers < 1 || c.producers > 256:
		return c, fmt.Errorf("-producers must be between 1 and 256")
	case c.rollback < 0 || c.rollback >= 1:
		return c, fmt.Errorf("-rollback must be at least 0 and below 1")
	case c.rate < 0:
		return c, fmt.Errorf("-rate must not be negative")
	case c.timeout <= 0:
		return c, fmt.Errorf("-timeout must be positive")
	case !identRE.MatchString(c.schema):
		return c, fmt.Errorf("-schema must be a lower-case SQL identifier")
	case c.queue == "":
		return c, fmt.Errorf("-queue must not be empty")
	}
	return c, nil
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// errDemoRollback is what the deliberately failing transactions return, so RunInTx rolls them back.
var errDemoRollback = errors.New("demo: rolled back on purpose")

// errDemoFailed is returned when the summary shows a broken guarantee; the summary says which.
var errDemoFailed = errors.New("the outbox guarantee did not hold (see the summary)")

// demoRun is the state of one demo run, shared by producers, the progress line and the summary.
type demoRun struct {
	mu         sync.Mutex
	committed  map[int64]time.Time // order id -> when RunInTx returned
	rolledBack []int64
	committedN atomic.Int64
	rolledN    atomic.Int64
	failedN    atomic.Int64
	firstErr   error
}

func (d *demoRun) commit(id int64, at time.Time) {
	d.mu.Lock()
	d.committed[id] = at
	d.mu.Unlock()
	d.committedN.Add(1)
}

func (d *demoRun) rollback(id int64) {
	d.mu.Lock()
	d.rolledBack = append(d.rolledBack, id)
	d.mu.Unlock()
	d.rolledN.Add(1)
}

func (d *demoRun) fail(err error) {
	d.mu.Lock()
	if d.firstErr == nil {
		d.firstErr = err
	}
	d.mu.Unlock()
	d.failedN.Add(1)
}

func demo(ctx context.Context, args []string, e env, stdout, stderr io.Writer) error {
	cfg, err := parseDemoFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsage) {
			fmt.Fprintln(stderr, err)
			return errUsage
		}
		return err
	}
	return runDemo(ctx, cfg, e, stdout, stderr)
}

func runDemo(ctx context.Context, cfg demoConfig, e env, stdout, stderr io.Writer) (err error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	redisOpt, redisName, err := e.redis()
	if err != nil {
		return err
	}
	rate := "as fast as they go"
	if cfg.rate > 0 {
		rate = fmt.Sprintf("%d/s", cfg.rate)
	}
	fmt.Fprintf(stdout, "bunbox demo: %d orders from %d producers at %s, %.0f%% of them rolled back on purpose\n",
		cfg.orders, cfg.producers, rate, cfg.rollback*100)
	fmt.Fprintf(stdout, "  PostgreSQL %s (schema %s), Redis %s (queue %s)\n",
		connect.Redact(e.databaseURL), cfg.schema, redisName, cfg.queue)

	// A clean state: a fresh schema and an empty queue.
	admin, err := e.postgres(ctx, connect.Options{})
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+cfg.schema+" CASCADE; CREATE SCHEMA "+cfg.schema); err != nil {
		return fmt.Errorf("create schema %s: %w", cfg.schema, err)
	}
	if !cfg.keep {
		defer func() {
			if _, derr := admin.ExecContext(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+cfg.schema+" CASCADE"); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop schema %s: %w", cfg.schema, derr))
			}
		}()
	}
	if err := pingRedis(redisOpt, redisName); err != nil {
		return err
	}
	inspector := asynq.NewInspector(redisOpt)
	defer inspector.Close()
	if err := deleteQueue(inspector, cfg.queue); err != nil {
		return err
	}
	defer func() {
		if derr := deleteQueue(inspector, cfg.queue); derr != nil {
			err = errors.Join(err, derr)
		}
	}()

	db, err := e.postgres(ctx, connect.Options{
		Params:       map[string]any{"search_path": cfg.schema},
		MaxOpenConns: cfg.producers + 40,
	})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := shop.Migrate(ctx, db); err != nil {
		return err
	}
	if cfg.notify {
		if err := relay.EnableNotifyTrigger(ctx, db, model.Location{}); err != nil {
			return err
		}
	}
	shop.Register(db, cfg.queue)

	// The relay and the worker run in this process, as goroutines, until the orders are drained.
	r, err := relay.New(db, redisOpt, relay.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer r.Close()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var bg sync.WaitGroup
	bgErrs := make(chan error, 2)
	bg.Go(func() { bgErrs <- r.Run(runCtx) })
	bg.Go(func() {
		bgErrs <- shop.RunWorker(runCtx, redisOpt, db, shop.WorkerConfig{Queue: cfg.queue, Concurrency: 32, Logger: logger})
	})
	stopBackground := func() error {
		stopRun()
		bg.Wait()
		close(bgErrs)
		var errs []error
		for err := range bgErrs {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}

	run := &demoRun{committed: make(map[int64]time.Time, cfg.orders)}
	start := time.Now()
	var producers sync.WaitGroup
	produced := make(chan struct{})
	next := atomic.Int64{}
	for range cfg.producers {
		producers.Go(func() { produce(runCtx, db, cfg, run, start, &next) })
	}
	go func() { producers.Wait(); close(produced) }()

	// Progress every 500ms; the end condition is checked every 25ms, with a deadline.
	deadline := time.NewTimer(cfg.timeout)
	defer deadline.Stop()
	check := time.NewTicker(25 * time.Millisecond)
	defer check.Stop()
	lastPrint := time.Now()
	var drainedAt time.Duration
	var timedOut bool
	producing := true
	fmt.Fprintf(stdout, "\n  %7s  %9s  %11s  %7s  %7s\n", "elapsed", "committed", "rolled back", "relayed", "handled")
wait:
	for {
		select {
		case <-ctx.Done():
			_ = stopBackground()
			producers.Wait()
			return errors.New("interrupted; the demo's schema and queue are cleaned up")
		case <-deadline.C:
			timedOut = true
			break wait
		case <-produced:
			producing = false
			produced = nil
		case <-check.C:
		}
		handled, _, qerr := countConfirmations(ctx, db)
		if qerr != nil {
			if ctx.Err() != nil {
				continue // interrupted: the next select returns
			}
			logger.Warn("count confirmations", slog.String("err", qerr.Error()))
			continue
		}
		done := !producing && handled >= run.committedN.Load()
		if done || time.Since(lastPrint) >= 500*time.Millisecond {
			lastPrint = time.Now()
			fmt.Fprintf(stdout, "  %6.1fs  %9d  %11d  %7d  %7d\n", time.Since(start).Seconds(),
				run.committedN.Load(), run.rolledN.Load(), r.Stats().Published, handled)
		}
		if done {
			drainedAt = time.Since(start)
			break
		}
	}
	if timedOut {
		stopRun() // stop the producers too
	}
	bgErr := stopBackground()
	producers.Wait()

	s, err := summarize(context.WithoutCancel(ctx), db, run)
	if err != nil {
		return err
	}
	s.drained, s.timedOut, s.timeout = drainedAt, timedOut, cfg.timeout
	s.print(stdout)
	if bgErr != nil {
		return fmt.Errorf("relay or worker: %w", bgErr)
	}
	if !s.ok() {
		return errDemoFailed
	}
	return nil
}

// produce places orders until every one of cfg.orders has been taken, pacing them to cfg.rate overall.
func produce(ctx context.Context, db *bun.DB, cfg demoConfig, run *demoRun, start time.Time, next *atomic.Int64) {
	for {
		k := next.Add(1) - 1
		if k >= int64(cfg.orders) || ctx.Err() != nil {
			return
		}
		if cfg.rate > 0 { // pacing to a rate, not waiting for a condition
			at := start.Add(time.Duration(k) * time.Second / time.Duration(cfg.rate))
			if d := time.Until(at); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		req := shop.PlaceOrderRequest{
			Customer: fmt.Sprintf("customer-%d@example.com", k%97),
			Lines: []shop.LineRequest{
				{SKU: "tea", Quantity: int(k%3) + 1, PriceCents: 450},
				{SKU: "scone", Quantity: 1, PriceCents: 325},
			},
		}
		// Every 1/rollback-th order is inserted, hooks and all, in a transaction that then fails.
		if int64(float64(k+1)*cfg.rollback) > int64(float64(k)*cfg.rollback) {
			var id int64
			err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				o, err := shop.InsertOrder(ctx, tx, req)
				if err != nil {
					return err
				}
				id = o.ID
				return errDemoRollback
			})
			switch {
			case errors.Is(err, errDemoRollback):
				run.rollback(id)
			case ctx.Err() != nil:
				return
			default:
				run.fail(err)
			}
			continue
		}
		o, err := shop.PlaceOrder(ctx, db, req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			run.fail(err)
			continue
		}
		run.commit(o.ID, time.Now())
	}
}

func countConfirmations(ctx context.Context, db bun.IDB) (orders, deliveries int64, err error) {
	err = db.NewSelect().Table("confirmations").
		ColumnExpr("count(*)").ColumnExpr("coalesce(sum(deliveries), 0)").
		Scan(ctx, &orders, &deliveries)
	return orders, deliveries, err
}

func deleteQueue(in *asynq.Inspector, queue string) error {
	if err := in.DeleteQueue(queue, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("delete asynq queue %s: %w", queue, err)
	}
	return nil
}

// summary is what the demo found, read back from the database.
type summary struct {
	committed, rolledBack, failed int64
	firstErr                      error
	ordersInDB                    int64
	outboxRows                    int64
	published                     int64
	pending                       int64
	handled                       int64 // handler runs
	duplicates                    int64 // handler runs beyond the first, over all orders
	lost                          int64 // committed orders without a confirmation
	rolledBackConfirmed           int64 // rolled-back orders with a confirmation
	p50, p99, max                 time.Duration
	drained                       time.Duration
	timedOut                      bool
	timeout                       time.Duration
}

func summarize(ctx context.Context, db *bun.DB, run *demoRun) (*summary, error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	s := &summary{
		committed:  int64(len(run.committed)),
		rolledBack: int64(len(run.rolledBack)),
		failed:     run.failedN.Load(),
		firstErr:   run.firstErr,
	}
	var err error
	if s.ordersInDB, err = db.NewSelect().Table("orders").Count(ctx); err != nil {
		return nil, fmt.Errorf("count orders: %w", err)
	}
	if s.outboxRows, err = db.NewSelect().Table("outbox_events").Count(ctx); err != nil {
		return nil, fmt.Errorf("count outbox rows: %w", err)
	}
	if s.published, err = db.NewSelect().Table("outbox_events").Where("published_at IS NOT NULL").Count(ctx); err != nil {
		return nil, fmt.Errorf("count published rows: %w", err)
	}
	if s.pending, err = db.NewSelect().Table("outbox_events").Where("published_at IS NULL").Count(ctx); err != nil {
		return nil, fmt.Errorf("count pending rows: %w", err)
	}
	var confs []shop.Confirmation
	if err := db.NewSelect().Model(&confs).Scan(ctx); err != nil {
		return nil, fmt.Errorf("read confirmations: %w", err)
	}
	rolled := make(map[int64]bool, len(run.rolledBack))
	for _, id := range run.rolledBack {
		rolled[id] = true
	}
	confirmed := make(map[int64]bool, len(confs))
	latencies := make([]time.Duration, 0, len(confs))
	for _, c := range confs {
		confirmed[c.OrderID] = true
		s.handled += int64(c.Deliveries)
		s.duplicates += int64(c.Deliveries - 1)
		if rolled[c.OrderID] {
			s.rolledBackConfirmed++
		}
		if at, ok := run.committed[c.OrderID]; ok {
			latencies = append(latencies, c.HandledAt.Sub(at))
		}
	}
	for id := range run.committed {
		if !confirmed[id] {
			s.lost++
		}
	}
	if len(latencies) > 0 {
		slices.Sort(latencies)
		pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
		s.p50, s.p99, s.max = pct(0.50), pct(0.99), latencies[len(latencies)-1]
	}
	return s, nil
}

func (s *summary) ok() bool {
	return !s.timedOut && s.lost == 0 && s.rolledBackConfirmed == 0 && s.failed == 0 &&
		s.ordersInDB == s.committed && s.outboxRows == s.committed
}

func (s *summary) print(w io.Writer) {
	mark := func(good bool) string {
		if good {
			return "ok"
		}
		return "FAIL"
	}
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  orders committed            %7d\n", s.committed)
	fmt.Fprintf(w, "  orders rolled back          %7d   (inserted, then the transaction failed on purpose)\n", s.rolledBack)
	if s.failed > 0 {
		fmt.Fprintf(w, "  orders failed               %7d   FAIL (first error: %v)\n", s.failed, s.firstErr)
	}
	fmt.Fprintf(w, "  events in the outbox        %7d   %s (one per committed order, none for a rollback)\n", s.outboxRows, mark(s.outboxRows == s.committed))
	fmt.Fprintf(w, "  events relayed              %7d   (rows published to asynq; %d still pending)\n", s.published, s.pending)
	fmt.Fprintf(w, "  tasks handled               %7d   (handler runs)\n", s.handled)
	fmt.Fprintf(w, "  duplicates                  %7d   (handler runs beyond the first for an order: asynq is at-least-once)\n", s.duplicates)
	fmt.Fprintf(w, "  lost                        %7d   %s (committed orders with no confirmation; must be 0)\n", s.lost, mark(s.lost == 0))
	fmt.Fprintf(w, "  rolled back but confirmed   %7d   %s (must be 0)\n", s.rolledBackConfirmed, mark(s.rolledBackConfirmed == 0))
	fmt.Fprintf(w, "  commit-to-handled latency   p50 %s   p99 %s   max %s\n", round(s.p50), round(s.p99), round(s.max))
	if s.timedOut {
		fmt.Fprintf(w, "  TIMED OUT after %s waiting for every committed order to be confirmed\n", s.timeout)
	} else {
		fmt.Fprintf(w, "  all confirmed %s after the first order\n", round(s.drained))
	}
	if s.ok() {
		fmt.Fprintf(w, "\nOK: every committed order was confirmed, no rolled-back order was.\n")
	} else {
		fmt.Fprintf(w, "\nFAILED: see the lines marked FAIL above.\n")
	}
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
