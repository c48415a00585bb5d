package relay

import (
	"cmp"
	"context"
	"log/slog"

	"github.com/bunbox/bunbox/internal/maintenance/lease"
	"github.com/bunbox/bunbox/internal/maintenance/reconcile"
	"github.com/bunbox/bunbox/internal/streamsql"
)

// indexOrderSettings are the planner settings under which a read in an index's order keeps to the index
// (streamsql.IndexOrderSettings), for the stream's rounds (streamBounds).
const indexOrderSettings = streamsql.IndexOrderSettings

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

// runReconciler is the reconciler that Run runs unless Config.DisableReconciler
// (reconcile.Leased): under the lease "bunbox.reconciler" in bunbox_leases, one relay per outbox at a
// time, at once and then every Reconciler.Interval. It says so when it cannot run.
func runReconciler(ctx context.Context, r *Relay) {
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
	// The lease is per outbox: in the table of its schema.
	l := lease.New(r.db, r.names, reconcile.LeaseName, cfg.LeaseTTL)
	_ = reconcile.NewLeased(rc.impl, l).Run(ctx)
}
