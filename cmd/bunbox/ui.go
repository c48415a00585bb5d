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

	"github.com/bunbox/bunbox/ui"
)

// uiTokenEnv names the environment variable that holds the UI's token: a flag would show it in ps.
const uiTokenEnv = "BUNBOX_UI_TOKEN"

// ui serves the operator page until ctx is done: read-only unless BUNBOX_UI_TOKEN is set.
func (c *cli) ui(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to serve the page on")
	withRedis := fs.Bool("redis", true, "show what asynq holds per queue (reads REDIS_URL/REDIS_ADDR); -redis=false for the outbox table only")
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("ui", rest); err != nil {
		return err
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	cfg := ui.Config{Token: strings.TrimSpace(c.uiToken), Logger: slog.New(slog.NewTextHandler(c.stderr, nil)), Schema: c.dbSchema, TablePrefix: c.dbPrefix}
	if *withRedis {
		opt, _, err := c.redis()
		if err != nil {
			return err
		}
		cfg.Redis = opt
	}
	h, err := ui.New(db, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("ui: listen on %s: %w", *addr, err)
	}
	mode := "read-only (set " + uiTokenEnv + " to allow retrying and purging dead events)"
	if cfg.Token != "" {
		mode = "writes allowed to an operator who signs in with " + uiTokenEnv
	}
	fmt.Fprintf(c.stdout, "bunbox ui: serving http://%s/ (%s)\n", ln.Addr(), mode)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("ui: %w", err)
	}
	return nil
}
