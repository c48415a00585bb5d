package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/bunbox/bunbox/internal/maintenance/lease"
	"github.com/bunbox/bunbox/internal/store"
)

// LeaseName is the row of bunbox_leases that the relays' reconcilers share: one holds it at a time.
const LeaseName = "bunbox.reconciler"

// Leased is the reconciler a relay runs: it takes the lease LeaseName (or waits for it), and while it
// holds it, it reconciles at once and then every Interval. It gives the lease up when its ctx is done,
// after its last pass.
//
// A database without the table bunbox_leases (the migrations not applied) gets a warning, and then every
// relay reconciles on its own: reconcilers may run side by side, only the work is done more than once.
type Leased struct {
	rc    *Reconciler
	lease *lease.Lease
}

// NewLeased returns the reconciler rc run under l.
func NewLeased(rc *Reconciler, l *lease.Lease) *Leased { return &Leased{rc: rc, lease: l} }

// Run keeps the lease and reconciles while it holds it, until ctx is done; it returns nil.
func (s *Leased) Run(ctx context.Context) error {
	lead := &lease.Leadership{}
	defer lead.Stop()
	gained := make(chan struct{}, 1)
	passes := make(chan struct{})
	go func() {
		defer close(passes)
		s.passes(ctx, lead, gained)
	}()
	s.keep(ctx, lead, gained)
	<-passes // the last pass is over before the lease is given up
	if lead.Held(time.Now()) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.lease.Release(rctx); err != nil {
			s.rc.cfg.Logger.LogAttrs(rctx, slog.LevelInfo, "bunbox reconciler: could not give the lease up; another relay takes it when it expires",
				slog.Any("err", err), slog.Duration("lease_ttl", s.lease.TTL()))
		}
	}
	return nil
}

// keep takes or renews the lease every TTL/3 until ctx is done, and tells lead (and gained, when the
// lease was not held before).
func (s *Leased) keep(ctx context.Context, lead *lease.Leadership, gained chan<- struct{}) {
	log := s.rc.cfg.Logger
	every := s.lease.TTL() / 3
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
		until, err := s.lease.Take(tctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		wasHeld := lead.Held(time.Now())
		switch {
		case errors.Is(err, store.ErrNoLeaseTable):
			if !warnedNoTable {
				warnedNoTable = true
				log.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler: no lease table, so every relay reconciles on its own "+
					"(correct, but the work is done more than once)", slog.Any("err", err))
			}
			until = time.Now().Add(s.lease.TTL())
		case err != nil:
			level := slog.LevelDebug
			if wasHeld {
				level = slog.LevelWarn // the passes stop when the lease runs out unrenewed
			}
			log.LogAttrs(ctx, level, "bunbox reconciler: could not renew its lease", slog.Any("err", err))
			timer.Reset(every)
			continue
		}
		if until.IsZero() {
			if wasHeld {
				log.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler: lease lost to another relay; it reconciles now")
			}
			lead.Lose()
		} else {
			lead.Renew(until)
			if !wasHeld {
				log.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler: took the lease; this relay reconciles",
					slog.String("holder", s.lease.Holder()), slog.Duration("interval", s.rc.cfg.Interval))
				select {
				case gained <- struct{}{}:
				default:
				}
			}
		}
		timer.Reset(every)
	}
}

// passes makes a pass every Interval while lead holds the lease, and at once when the lease was gained;
// a pass is cancelled when the lease runs out under it.
func (s *Leased) passes(ctx context.Context, lead *lease.Leadership, gained <-chan struct{}) {
	rc := s.rc
	timer := time.NewTimer(rc.cfg.Interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-gained:
		}
		if pctx, done, ok := lead.Begin(ctx); ok {
			res, err := rc.RunOnce(pctx)
			lost := pctx.Err() != nil
			done()
			switch {
			case ctx.Err() != nil:
				return
			case lost:
				rc.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler: pass cut short, its lease ran out unrenewed",
					slog.Int("checked", res.Checked), slog.Int("requeued", res.Requeued))
			default:
				rc.Report(ctx, res, err)
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
