package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/bunbox/bunbox/internal/relayenv"
	"github.com/bunbox/bunbox/relay"
)

// reconcileReport is what `bunbox reconcile` prints.
type reconcileReport struct {
	Window   float64 `json:"window_seconds"`
	Checked  int     `json:"checked"`
	Missing  int     `json:"missing"`
	Requeued int     `json:"requeued"`
	Duration float64 `json:"duration_seconds"`
	// Events are the missing ones (the first 1,000): requeued for the relay, unless their
	// row changed meanwhile.
	Events []missingEvent `json:"events"`
}

type missingEvent struct {
	EventID string `json:"event_id"`
	Queue   string `json:"queue"`
}

// reconcile makes one reconciler pass and prints the events whose task Redis had lost.
func (c *cli) reconcile(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bunbox reconcile", flag.ContinueOnError)
	window := fs.Duration("window", time.Hour, "check the events published within this window (shorter than OUTBOX_TASK_RETENTION)")
	asJSON := fs.Bool("json", false, "print JSON")
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("reconcile", rest); err != nil {
		return err
	}
	if *window <= 0 {
		return usageError(c.stderr, "-window must be positive, got %s", *window)
	}
	cfg, err := relayenv.Config()
	if err != nil {
		return err
	}
	c.loc.Codec = cfg.Location.Codec // OUTBOX_CODEC_KEYS_FILE
	redisOpt, redisName, err := c.redis()
	if err != nil {
		return err
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	rc, err := relay.NewReconciler(db, redisOpt, relay.ReconcilerConfig{
		Window: *window, TaskRetention: cfg.TaskRetention, Routes: cfg.Routes, Location: c.loc,
		Logger: slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return fmt.Errorf("reconciler (Redis at %s): %w", redisName, err)
	}
	defer rc.Close()
	res, err := rc.ReconcileOnce(ctx)
	rep := reconcileReport{Window: window.Seconds(), Checked: res.Checked, Missing: res.Missing, Requeued: res.Requeued,
		Duration: res.Duration.Seconds(), Events: make([]missingEvent, 0, len(res.MissingTasks))}
	for _, m := range res.MissingTasks {
		rep.Events = append(rep.Events, missingEvent{EventID: m.EventID.String(), Queue: m.Queue})
	}
	if err != nil {
		// What the pass did before it failed is kept: say it, then fail.
		fmt.Fprintf(c.stderr, "bunbox: the pass stopped after %d checked, %d requeued\n", rep.Checked, rep.Requeued)
		return fmt.Errorf("reconcile: %w", err)
	}
	if *asJSON {
		return c.printJSON(rep)
	}
	fmt.Fprintf(c.stdout, "checked %d events published within %s: %d missing from Redis, %d requeued\n",
		rep.Checked, *window, rep.Missing, rep.Requeued)
	if len(rep.Events) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT ID\tQUEUE")
	for _, e := range rep.Events {
		fmt.Fprintf(tw, "%s\t%s\n", e.EventID, e.Queue)
	}
	if more := rep.Missing - len(rep.Events); more > 0 {
		fmt.Fprintf(tw, "(and %d more)\t\n", more)
	}
	return tw.Flush()
}
