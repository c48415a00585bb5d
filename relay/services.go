package relay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/maintenance/cancel"
	"github.com/bunbox/bunbox/internal/maintenance/cleanup"
	"github.com/bunbox/bunbox/internal/maintenance/keytrack"
	"github.com/bunbox/bunbox/internal/maintenance/listen"
	"github.com/bunbox/bunbox/internal/maintenance/wakeup"
)

// The services Run runs beside the delivery, each a small type of its own in internal/maintenance, given
// what it needs of the relay as values and callbacks: the cleanup, the cancel, the key tracker, the
// wake-up and the listener, and the reconciler. newServices builds those that New can build; Run starts
// each and stops each when its ctx is done.

// services are the relay's services, built by New.
type services struct {
	cleaner   *cleanup.Cleaner  // nil when PublishedRetention is negative
	canceller *cancel.Canceller // takes cancelled events' tasks back out of asynq
	keys      *keytrack.Tracker // hands out keyed events in order; nil without an inspector
	watcher   *wakeup.Watcher   // reads the id sequence; nil with WakeInterval negative
	listener  *listen.Listener  // LISTENs on the outbox's channel; nil with DisableNotify
	owned     []io.Closer       // what New made for them, closed by Close
	wakeCh    chan struct{}     // wakes the loop: a hint that rows may wait

	all []service // those that run, in the order Run starts them
}

// service is what Run starts: it runs until its ctx is done.
type service interface {
	Run(ctx context.Context) error
}

// serviceFunc is a func as a service.
type serviceFunc func(ctx context.Context) error

func (f serviceFunc) Run(ctx context.Context) error { return f(ctx) }

// startServices starts every service on wg; each stops when ctx is done, and wg.Wait waits for all.
func (s *services) startServices(ctx context.Context, wg *sync.WaitGroup) {
	for _, svc := range s.all {
		wg.Go(func() { _ = svc.Run(ctx) })
	}
}

// closeServices releases what New made for the services.
func (s *services) closeServices() error {
	var errs []error
	for _, c := range s.owned {
		errs = append(errs, c.Close())
	}
	s.owned = nil
	return errors.Join(errs...)
}

// signal wakes the relay's loop without blocking: a wake-up already pending is enough.
func signal(wake chan<- struct{}) func() {
	return func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// newServices builds r's services, which signal wakeCh when rows may wait, in the order Run starts them:
// the listener, the wake-up, the cleanup, the key tracker, the reconciler (unless
// Config.DisableReconciler), the cancel.
func newServices(r *Relay, redis asynq.RedisConnOpt) error {
	r.wakeCh = make(chan struct{}, 1)
	if r.cfg.PublishedRetention > 0 {
		c, err := cleanup.New(r.db, r.names, cleanup.Config{
			Retention: r.cfg.PublishedRetention, Interval: r.cfg.CleanupInterval, BatchSize: r.cfg.CleanupBatchSize,
			Bounds: r.cfg.bounds().sql, Logger: r.log, Now: r.cfg.now,
			OnDeleted: func(n int64) { r.counters.cleaned.Add(n) },
		})
		if err != nil {
			return err
		}
		r.cleaner = c
	}
	if err := newKeyTracker(r, redis); err != nil {
		return err
	}
	if err := newWakeUps(r); err != nil {
		return err
	}
	ccfg := cancel.Config{
		CheckInterval: r.cfg.CancelCheckInterval, PollInterval: r.cfg.PollInterval, Routes: r.cfg.Routes,
		Backoff: r.cfg.roundBackoff, Logger: r.log, Wake: signal(r.wakeCh), CleanupEvery: r.cfg.CleanupInterval,
		Cursor: func(ctx context.Context) bool { _, cursor := r.rounds.stream.catalog(ctx); return cursor },
	}
	if r.keys != nil {
		ccfg.Inspector = r.keys // its look-ups register a queue Redis forgot
	}
	if c := r.cleaner; c != nil {
		ccfg.Cleanup = func(ctx context.Context) {
			if _, err := c.CancelledOnce(ctx); err != nil && ctx.Err() == nil {
				r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: deleting cancelled rows failed", slog.Any("err", err))
			}
		}
	}
	var err error
	if r.canceller, err = cancel.New(r.db, r.names, ccfg); err != nil {
		return err
	}
	if r.listener != nil {
		r.all = append(r.all, r.listener)
	}
	if r.watcher != nil {
		r.all = append(r.all, r.watcher)
	}
	if r.cleaner != nil {
		r.all = append(r.all, r.cleaner)
	}
	if r.keys != nil {
		r.all = append(r.all, r.keys)
	}
	if !r.cfg.DisableReconciler {
		r.all = append(r.all, serviceFunc(func(ctx context.Context) error { runReconciler(ctx, r); return nil }))
	}
	r.all = append(r.all, r.canceller)
	return nil
}

// newWakeUps builds the wake-up and the listener, unless they are turned off.
func newWakeUps(r *Relay) error {
	var err error
	if r.cfg.WakeInterval > 0 {
		r.watcher, err = wakeup.New(r.db, r.names, wakeup.Config{
			Interval: r.cfg.WakeInterval, PollInterval: r.cfg.PollInterval, MinPollInterval: r.cfg.MinPollInterval,
			HotWindow: hotWindow, State: &r.wake, Wake: signal(r.wakeCh), Backoff: r.cfg.roundBackoff, Logger: r.log,
		})
		if err != nil {
			return err
		}
	}
	if !r.cfg.DisableNotify {
		r.listener, err = listen.New(r.db, listen.Config{
			Channel: r.names.Channel(notifyChannel), URL: r.cfg.ListenURL, PollInterval: r.cfg.PollInterval,
			Wake: signal(r.wakeCh), Backoff: r.cfg.roundBackoff, Logger: r.log,
		})
	}
	return err
}

// newKeyTracker builds the key tracker on Config.Inspector, or on an inspector and a pipelined Redis
// client of its own made from the Redis options; none without either (keyed rows wait; Run says so).
func newKeyTracker(r *Relay, opt asynq.RedisConnOpt) error {
	cfg := keytrack.Config{
		Inspector: r.cfg.Inspector, CheckInterval: r.cfg.KeyCheckInterval, PollInterval: r.cfg.PollInterval,
		Concurrency: r.cfg.Concurrency, Routes: r.cfg.Routes, Bounds: r.cfg.bounds().sql, Backoff: r.cfg.roundBackoff,
		Logger: r.log, Wake: signal(r.wakeCh),
		OnCompleted: func(n int) { r.counters.completed.Add(int64(n)) },
		OnDead: func(ctx context.Context, d keytrack.Dead) {
			r.counters.dead.Add(1)
			if r.cfg.Observer.OnDead != nil {
				r.cfg.Observer.OnDead(ctx, DeadEvent{ID: d.ID, EventID: d.EventID.String(), EventName: d.Name, Err: errors.New(d.Err)})
			}
		},
	}
	if cfg.Inspector == nil {
		if opt == nil {
			return nil
		}
		ins, err := fromRedisOpt(opt, asynq.NewInspector)
		if err != nil {
			return err
		}
		r.owned = append(r.owned, ins)
		cfg.Inspector, cfg.RedisOpt = ins, opt
		if cfg.Redis = r.rdb; cfg.Redis == nil {
			if cfg.Redis, _, err = pipelinedRedis(opt); err != nil {
				return err
			}
			r.owned = append(r.owned, cfg.Redis)
		}
	}
	t, err := keytrack.New(r.db, r.names, cfg)
	if err != nil {
		return err
	}
	r.keys = t
	return nil
}
