package main

import (
	"context"
	"errors"
	"flag"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/relay"
)

// ledgerEnqueuer wraps the relay's asynq client and writes every enqueue that reached Redis to the
// relay's enqueue ledger, with the time span of the call:
//
//	ok <task id> <start unix ns> <end unix ns>         a new task was created
//	conflict <task id> <start unix ns> <end unix ns>   the task already existed (deduplicated by TaskID)
//
// The span places the enqueue in a Redis incarnation (see the suite's definition of a duplicate).
type ledgerEnqueuer struct {
	client   *asynq.Client
	led      *ledger
	noTaskID bool // sabotage: enqueue without the TaskID, so asynq cannot deduplicate
}

func (e *ledgerEnqueuer) EnqueueContext(ctx context.Context, t *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	id := ""
	for _, o := range opts {
		if o.Type() == asynq.TaskIDOpt {
			id = o.Value().(string)
		}
	}
	if e.noTaskID {
		kept := opts[:0:0]
		for _, o := range opts {
			if o.Type() != asynq.TaskIDOpt {
				kept = append(kept, o)
			}
		}
		opts = kept
	}
	start := time.Now()
	info, err := e.client.EnqueueContext(ctx, t, opts...)
	end := time.Now()
	switch {
	case err == nil:
		e.led.printf("ok %s %d %d", id, start.UnixNano(), end.UnixNano())
	case errors.Is(err, asynq.ErrTaskIDConflict):
		e.led.printf("conflict %s %d %d", id, start.UnixNano(), end.UnixNano())
	}
	return info, err
}

func (e *ledgerEnqueuer) Ping() error { return e.client.Ping() }

// runRelay runs a relay and a reconciler until it is told to stop (or killed). Both are (re)built until
// PostgreSQL and Redis answer, as a supervisor would restart a process that failed to start.
func runRelay(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("relay", flag.ExitOnError)
	c.register(fs)
	window := fs.Duration("reconcile-window", 2*time.Minute, "reconciler window")
	interval := fs.Duration("reconcile-interval", 3*time.Second, "reconciler interval")
	sabotage := fs.String("break", "", "sabotage, to prove the suite notices: reconciler (run none) or taskid (enqueue without TaskID)")
	_ = fs.Parse(args)
	log := logger(c.id)

	led, err := openLedger(c.dir + "/enqueue-" + c.id + ".log")
	if err != nil {
		return err
	}
	defer led.close()
	redisOpt := asynq.RedisClientOpt{Addr: c.redis, DialTimeout: 2 * time.Second}
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	db := openDB(c.db, 6)
	defer db.Close()

	const taskRetention = time.Hour
	r, err := retry(ctx, log, "relay.New", func() (*relay.Relay, error) {
		// The Redis options are for the relay's asynq inspector, which tracks keyed events; enqueues go
		// through the ledger's client.
		return relay.New(db, redisOpt, relay.Config{
			BatchSize:       100,
			PollInterval:    200 * time.Millisecond,
			TaskRetention:   taskRetention,
			RetryBackoff:    100 * time.Millisecond,
			RetryBackoffMax: time.Second,
			RoundBackoff:    50 * time.Millisecond,
			RoundBackoffMax: time.Second,
			EnqueueTimeout:  2 * time.Second,
			Logger:          log,
			Routes:          Routes,
			Enqueuer:        &ledgerEnqueuer{client: client, led: led, noTaskID: *sabotage == "taskid"},
			// The suite runs its reconciler apart (below), with its own window and interval, or none.
			DisableReconciler: true,
		})
	})
	if err != nil {
		return nil // stopped before it could start
	}
	defer r.Close()
	if *sabotage == "reconciler" {
		return r.Run(ctx)
	}
	rc, err := retry(ctx, log, "relay.NewReconciler", func() (*relay.Reconciler, error) {
		return relay.NewReconciler(db, redisOpt, relay.ReconcilerConfig{
			Window:        *window,
			Interval:      *interval,
			TaskRetention: taskRetention,
			Routes:        Routes,
			Logger:        log,
		})
	})
	if err != nil {
		return nil
	}
	defer rc.Close()

	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = r.Run(ctx) })
	wg.Go(func() { errs[1] = rc.Run(ctx) })
	wg.Wait()
	return errors.Join(errs...)
}
