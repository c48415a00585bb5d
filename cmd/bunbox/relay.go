package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/bunbox/bunbox/internal/relayenv"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/relay/relaymetrics"
)

func (c *cli) relay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bunbox relay", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9464", "serve Prometheus metrics at /metrics, and the probes /healthz and /readyz, on this address (empty: off)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	enableNotify := fs.Bool("enable-notify", false, "install the outbox NOTIFY trigger first, so the relay wakes within milliseconds of a commit")
	reconcile := fs.Bool("reconcile", true, "run the reconciler (one relay per database at a time, by a lease): re-deliver events whose task Redis lost; -reconcile=false when one runs apart")
	reconcileWindow := fs.Duration("reconcile-window", 0, "the reconciler's window: events published within it are checked (0: 1h, or half of OUTBOX_TASK_RETENTION when shorter; must be shorter than OUTBOX_TASK_RETENTION)")
	reconcileInterval := fs.Duration("reconcile-interval", time.Minute, "pause between two reconciler passes")
	codecKeysFile := codecKeysFlag(fs)
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("relay", rest); err != nil {
		return err
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		return usageError(c.stderr, "%v", err)
	}
	cfg, err := relayenv.Config()
	if err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	if *reconcileWindow < 0 {
		return usageError(c.stderr, "-reconcile-window must not be negative, got %s", *reconcileWindow)
	}
	cfg.DisableReconciler = !*reconcile
	cfg.Reconciler.Window, cfg.Reconciler.Interval = *reconcileWindow, *reconcileInterval
	if err := c.applyCodecKeys(&cfg, *codecKeysFile); err != nil {
		return err
	}
	// The one Location of this relay: -schema and -table-prefix (else OUTBOX_SCHEMA and OUTBOX_TABLE_PREFIX,
	// as relayenv.Config read them too), the Codec of -codec-keys-file (else OUTBOX_CODEC_KEYS_FILE).
	c.loc.Codec = cfg.Location.Codec
	cfg.Location = c.loc // its reconciler takes the same one

	redisOpt, redisName, err := c.redis()
	if err != nil {
		return err
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	metrics, err := relaymetrics.NewMetrics(relaymetrics.MetricsConfig{DB: db, Location: c.loc})
	if err != nil {
		return err
	}
	cfg.Observer = metrics.Observer(cfg.Observer)
	cfg.Reconciler.OnPass = metrics.ObserveReconcile
	if *enableNotify {
		if err := relay.EnableNotifyTrigger(ctx, db, cfg.Location); err != nil {
			return fmt.Errorf("install the notify trigger: %w", err)
		}
	}
	r, err := relay.New(db, redisOpt, cfg)
	if err != nil {
		return fmt.Errorf("relay (Redis at %s): %w", redisName, err)
	}
	defer r.Close()
	metrics.SetRelay(r)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	metricsDone := make(chan error, 1)
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: listen on %s: %w", *metricsAddr, err)
		}
		probes := r.HealthHandler()
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metricsHandler(metrics))
		mux.Handle("GET /healthz", probes)
		mux.Handle("GET /readyz", probes)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		cfg.Logger.Info("metrics listening", slog.String("addr", "http://"+ln.Addr().String()+"/metrics"))
		go func() {
			err := srv.Serve(ln)
			if !errors.Is(err, http.ErrServerClosed) {
				cancel() // the relay stops too: a relay without its metrics should not run unnoticed
				metricsDone <- fmt.Errorf("metrics: %w", err)
				return
			}
			metricsDone <- nil
		}()
		defer func() {
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
		}()
	} else {
		metricsDone <- nil
	}
	if err := r.Run(ctx); err != nil {
		return err
	}
	select {
	case err := <-metricsDone:
		return err
	default:
		return nil
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("-log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
