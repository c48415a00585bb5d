package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/worker"
)

var errLostAck = errors.New("fault: acknowledgement lost after the effect committed")

// runWorker serves order.placed, account.changed (keyed by account), and order.audited fanned out to its two listeners (Routes), with bunx
// Inbox handlers whose effect is a row in fault_effects, written in the inbox's transaction. Outside that transaction every delivery is written
// to the worker's delivery ledger (d <task id> <task type> <retry count> <pid> when it starts,
// e <task id> <task type> <ok> <pid> when it returns), so the checker sees asynq redeliver while the
// effects stay once, and sees the handlers that a SIGKILL cut. With probability -lost-ack the handler fails after its
// transaction committed, as if the acknowledgement had been lost: asynq retries, the inbox skips.
func runWorker(ctx context.Context, args []string) error {
	var c common
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	c.register(fs)
	lostAck := fs.Float64("lost-ack", 0.03, "probability of failing a handled task after its commit")
	concurrency := fs.Int("concurrency", 6, "asynq concurrency")
	work := fs.Duration("work", 50*time.Millisecond, "longest time a handler works inside its transaction (random up to this), so that kills land mid-transaction")
	sabotage := fs.String("break", "", "sabotage, to prove the suite notices: inbox (write the effect without the inbox)")
	kick := fs.Duration("recover-every", 5*time.Second, "how often to start a short-lived asynq server whose start-up recovers tasks of killed workers (0: never)")
	_ = fs.Parse(args)
	log := logger(c.id)

	led, err := openLedger(c.dir + "/deliveries-" + c.id + ".log")
	if err != nil {
		return err
	}
	defer led.close()
	db := openDB(c.db, *concurrency+2)
	defer db.Close()
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(c.seed), uint64(time.Now().UnixNano())))
	chance := func(p float64) bool {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.Float64() < p
	}
	randDuration := func(d time.Duration) time.Duration {
		rngMu.Lock()
		defer rngMu.Unlock()
		return time.Duration(rng.Int64N(int64(d)))
	}

	// The effect of a task: a row keyed by the task's id (the event id, or "<event id>:<listener>" for
	// a fanned-out event), written with the handler's transaction.
	writeEffect := func(ctx context.Context, db bun.IDB, t *asynq.Task) error {
		id, err := worker.TaskEventID(t)
		if err != nil {
			return err
		}
		key := id.String()
		if l := t.Headers()[wire.HeaderListener]; l != "" {
			key += ":" + l
		}
		_, err = db.NewRaw("INSERT INTO fault_effects (effect_key, event_id, event_name, worker) VALUES (?, ?, ?, ?)",
			key, id, t.Type(), c.id).Exec(ctx)
		return err
	}
	inbox := worker.NewInbox(db, worker.WithInboxLogger(log))
	handler := func(name string) asynq.Handler {
		effect := inbox.Handler(name, func(ctx context.Context, tx bun.Tx, t *asynq.Task) error {
			err := writeEffect(ctx, tx, t)
			if err == nil && *work > 0 {
				time.Sleep(randDuration(*work)) // the handler's work, with the transaction open
			}
			return err
		})
		if *sabotage == "inbox" {
			effect = asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error { return writeEffect(ctx, db, t) })
		}
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			if err := effect.ProcessTask(ctx, t); err != nil {
				return err
			}
			if chance(*lostAck) {
				return errLostAck
			}
			return nil
		})
	}
	// account.changed: besides its effect, the handler applies the event to the account's handled_seq,
	// which must go 1, 2, 3... in order; an event that finds another number is written to
	// fault_order_violations (and applied anyway, so that one violation does not hide the next).
	accountHandler := inbox.Handler("account", func(ctx context.Context, tx bun.Tx, t *asynq.Task) error {
		if err := writeEffect(ctx, tx, t); err != nil {
			return err
		}
		var p AccountChanged
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
		}
		var found int64
		if err := tx.NewRaw("SELECT handled_seq FROM fault_accounts WHERE id = ? FOR UPDATE", p.Account).Scan(ctx, &found); err != nil {
			return err
		}
		if found != p.Seq-1 {
			if _, err := tx.NewRaw("INSERT INTO fault_order_violations (account, seq, handled_seq, worker) VALUES (?, ?, ?, ?)",
				p.Account, p.Seq, found, c.id).Exec(ctx); err != nil {
				return err
			}
		}
		if _, err := tx.NewRaw("UPDATE fault_accounts SET handled_seq = greatest(handled_seq, ?) WHERE id = ?", p.Seq, p.Account).Exec(ctx); err != nil {
			return err
		}
		if *work > 0 {
			time.Sleep(randDuration(*work)) // the handler's work, with the transaction open
		}
		return nil
	})
	mux := asynq.NewServeMux()
	mux.Handle(EventPlaced, handler("placed"))
	mux.Handle(EventAccount, asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if err := accountHandler.ProcessTask(ctx, t); err != nil {
			return err
		}
		if chance(*lostAck) {
			return errLostAck
		}
		return nil
	}))
	for _, l := range Routes.Listeners(EventAudited) {
		Routes.Handle(mux, EventAudited, l, handler(l)) // each listener its own task and inbox record
	}
	routed := worker.ArchiveUnrouted(mux, log)
	// Every delivery, routed or not, is written before the handler runs and again when it returns; a
	// start without an end is a handler cut by a SIGKILL.
	pid := os.Getpid()
	//
	// account.changed also gets, with the time, ks <task id> <account> <seq> <pid> <unix ns> when it starts
	// and ke <task id> <account> <seq> <pid> <unix ns> <ok> when it returns: the checker finds in them
	// whether two runs of one account overlapped or ran out of order.
	root := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		id = cmp.Or(id, "-")
		retried, _ := asynq.GetRetryCount(ctx)
		var acct AccountChanged
		keyed := t.Type() == EventAccount && json.Unmarshal(t.Payload(), &acct) == nil && acct.Account != ""
		led.printf("d %s %s %d %d", id, t.Type(), retried, pid)
		if keyed {
			led.printf("ks %s %s %d %d %d", id, acct.Account, acct.Seq, pid, time.Now().UnixNano())
		}
		err := routed.ProcessTask(ctx, t)
		if keyed {
			led.printf("ke %s %s %d %d %d %t", id, acct.Account, acct.Seq, pid, time.Now().UnixNano(), err == nil)
		}
		led.printf("e %s %s %t %d", id, t.Type(), err == nil, pid)
		return err
	})

	redisOpt := asynq.RedisClientOpt{Addr: c.redis, DialTimeout: 2 * time.Second}
	srv := newServer(redisOpt, *concurrency, log)
	if err := srv.Start(root); err != nil {
		return err
	}
	log.Info("worker started")
	var tick <-chan time.Time
	if *kick > 0 {
		t := time.NewTicker(*kick)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			srv.Shutdown()
			log.Info("worker stopped")
			return nil
		case <-tick:
			// asynq recovers the tasks a killed worker held only once their lease expired, from a
			// recoverer that runs at server start and then every minute. A short-lived server makes it
			// run now; it serves the same handlers while it is up.
			k := newServer(redisOpt, 1, log)
			if err := k.Start(root); err == nil {
				k.Shutdown()
			}
		}
	}
}

func newServer(redisOpt asynq.RedisClientOpt, concurrency int, log *slog.Logger) *asynq.Server {
	return asynq.NewServer(redisOpt, asynq.Config{
		Concurrency:              concurrency,
		Queues:                   map[string]int{model.DefaultQueue: 2, "critical": 1},
		TaskCheckInterval:        10 * time.Millisecond,
		DelayedTaskCheckInterval: 200 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		RetryDelayFunc: func(n int, err error, _ *asynq.Task) time.Duration {
			return min(100*time.Millisecond<<min(n, 10), 2*time.Second)
		},
		LogLevel: asynq.WarnLevel,
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			if errors.Is(err, errLostAck) {
				return
			}
			log.LogAttrs(ctx, slog.LevelWarn, "task failed", slog.String("task_type", t.Type()),
				slog.String("event_id", t.Headers()[wire.HeaderEventID]), slog.Any("err", err))
		}),
	})
}
