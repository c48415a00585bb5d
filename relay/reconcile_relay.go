package relay

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// reconcilerDefaults is the ReconcilerConfig of the reconciler that Run runs: c.Reconciler with the
// relay's TaskRetention, Routes and Logger, and a Window that fits TaskRetention.
func (c Config) reconcilerDefaults() ReconcilerConfig {
	rc := c.Reconciler
	rc.TaskRetention = c.TaskRetention
	rc.Routes = c.Routes
	rc.Location = c.Location
	if rc.Window == 0 {
		rc.Window = min(reconcileWindowDefault, c.TaskRetention/2)
	}
	rc.Logger = cmp.Or(rc.Logger, c.Logger)
	return rc.withDefaults()
}

// reconcileLoop is the reconciler that Run runs unless Config.DisableReconciler: it takes the lease
// "bunbox.reconciler" in bunbox_leases (or waits for it), and while it holds it, it reconciles at once
// and then every Reconciler.Interval. It gives the lease up when ctx is done, after its last pass.
//
// A database without the table bunbox_leases (the migrations not applied) gets a warning, and then every
// relay reconciles on its own: reconcilers may run side by side (see Reconciler), only the work is done
// more than once.
func (r *Relay) reconcileLoop(ctx context.Context) {
	cfg := r.cfg.Reconciler
	if cfg.Inspector == nil && r.redisOpt == nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: its reconciler does not run: it has neither the Redis "+
			"options (New was given nil) nor Config.Reconciler.Inspector; tasks Redis loses are not delivered again "+
			"unless a reconciler runs apart (set Config.DisableReconciler to silence this)")
		return
	}
	rc, err := newReconciler(r.db, r.redisOpt, cfg)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: its reconciler does not run: tasks Redis loses are not delivered again",
			slog.Any("err", err))
		return
	}
	defer func() { _ = rc.Close() }()

	l := newLease(r.db, reconcileLeaseName, cfg.LeaseTTL)
	l.names = r.names // the lease is per outbox: in the table of its schema
	lead := &leadership{}
	defer lead.stop()
	gained := make(chan struct{}, 1)
	passes := make(chan struct{})
	go func() {
		defer close(passes)
		r.reconcilePasses(ctx, rc, lead, gained)
	}()
	r.keepLease(ctx, l, lead, gained)
	<-passes // the last pass is over before the lease is given up
	if lead.held(time.Now()) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := l.release(rctx); err != nil {
			r.log.LogAttrs(rctx, slog.LevelInfo, "bunbox reconciler: could not give the lease up; another relay takes it when it expires",
				slog.Any("err", err), slog.Duration("lease_ttl", cfg.LeaseTTL))
		}
	}
}

// keepLease takes or renews the lease every LeaseTTL/3 until ctx is done, and tells lead (and gained,
// when the lease was not held before).
func (r *Relay) keepLease(ctx context.Context, l *lease, lead *leadership, gained chan<- struct{}) {
	every := l.ttl / 3
	timer := time.NewTimer(0)
	defer timer.Stop()
	warnedNoTable := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		tctx, cancel := context.WithTimeout(ctx, every)
		until, err := l.take(tctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		wasHeld := lead.held(time.Now())
		switch {
		case errors.Is(err, errNoLeaseTable):
			if !warnedNoTable {
				warnedNoTable = true
				r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler: no lease table, so every relay reconciles on its own "+
					"(correct, but the work is done more than once)", slog.Any("err", err))
			}
			until = l.now().Add(l.ttl)
		case err != nil:
			level := slog.LevelDebug
			if wasHeld {
				level = slog.LevelWarn // the passes stop when the lease runs out unrenewed
			}
			r.log.LogAttrs(ctx, level, "bunbox reconciler: could not renew its lease", slog.Any("err", err))
			timer.Reset(every)
			continue
		}
		if until.IsZero() {
			if wasHeld {
				r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler: lease lost to another relay; it reconciles now")
			}
			lead.lose()
		} else {
			lead.renew(until)
			if !wasHeld {
				r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler: took the lease; this relay reconciles",
					slog.String("holder", l.holder), slog.Duration("interval", r.cfg.Reconciler.Interval))
				select {
				case gained <- struct{}{}:
				default:
				}
			}
		}
		timer.Reset(every)
	}
}

// reconcilePasses makes a pass every Interval while lead holds the lease, and at once when the lease was
// gained; a pass is cancelled when the lease runs out under it.
func (r *Relay) reconcilePasses(ctx context.Context, rc *Reconciler, lead *leadership, gained <-chan struct{}) {
	timer := time.NewTimer(rc.cfg.Interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-gained:
		}
		if pctx, done, ok := lead.begin(ctx); ok {
			res, err := rc.ReconcileOnce(pctx)
			lost := pctx.Err() != nil
			done()
			switch {
			case ctx.Err() != nil:
				return
			case lost:
				r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler: pass cut short, its lease ran out unrenewed",
					slog.Int("checked", res.Checked), slog.Int("requeued", res.Requeued))
			default:
				rc.report(ctx, res, err)
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(rc.cfg.Interval)
	}
}

// leadership is what a relay knows of its lease: held until a local time, and the pass running under it,
// cancelled when the lease runs out unrenewed or is lost.
type leadership struct {
	mu     sync.Mutex
	until  time.Time          // the lease is surely held before it; zero: not held
	cancel context.CancelFunc // of the pass in flight, if any
	expiry *time.Timer        // fires at until
}

func (l *leadership) held(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.until)
}

// renew records the lease as held until until, and arms the expiry.
func (l *leadership) renew(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until = until
	d := time.Until(until)
	if l.expiry == nil {
		l.expiry = time.AfterFunc(d, l.expire)
		return
	}
	l.expiry.Reset(d)
}

// expire cancels the pass in flight once the lease has run out unrenewed.
func (l *leadership) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := time.Until(l.until); d > 0 { // renewed meanwhile
		l.expiry.Reset(d)
		return
	}
	l.until = time.Time{}
	if l.cancel != nil {
		l.cancel()
	}
}

// lose records that another holder has the lease.
func (l *leadership) lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until = time.Time{}
	if l.cancel != nil {
		l.cancel()
	}
}

// begin starts a pass if the lease is held: its context is cancelled when the lease runs out or is lost.
// Call done when the pass is over.
func (l *leadership) begin(ctx context.Context) (pctx context.Context, done func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !time.Now().Before(l.until) {
		return nil, nil, false
	}
	pctx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	return pctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.cancel = nil
		cancel()
	}, true
}

func (l *leadership) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expiry != nil {
		l.expiry.Stop()
	}
}
