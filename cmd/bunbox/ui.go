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

// The operator page's server timeouts: a request (headers and body: the page's forms are small) must
// arrive within uiReadTimeout, its answer (a page reads PostgreSQL and asynq for up to 10 s) leave within
// uiWriteTimeout, and an idle keep-alive connection is closed after uiIdleTimeout.
const (
	uiReadHeaderTimeout = 5 * time.Second
	uiReadTimeout       = 10 * time.Second
	uiWriteTimeout      = 30 * time.Second
	uiIdleTimeout       = 60 * time.Second
)

// ui serves the operator page until ctx is done: read-only and open unless BUNBOX_UI_TOKEN is set, which
// guards every route (-open-reads opens the reads again).
func (c *cli) ui(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to serve the page on")
	withRedis := fs.Bool("redis", true, "show what asynq holds per queue (reads REDIS_URL/REDIS_ADDR); -redis=false for the outbox table only")
	openReads := fs.Bool("open-reads", false, "with "+uiTokenEnv+": let anyone who reaches the page read it without the token (payloads and errors truncated); writes still need a sign-in")
	trustProxy := fs.Bool("trust-proxy", false, "believe X-Forwarded-Proto (a Secure cookie behind https) and X-Forwarded-For (the sign-in throttle's client) from a reverse proxy in front")
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
	cfg := ui.Config{Token: strings.TrimSpace(c.uiToken), Logger: slog.New(slog.NewTextHandler(c.stderr, nil)), Location: c.loc,
		OpenReads: *openReads, TrustProxy: *trustProxy}
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
	mode := "read-only, open to whoever reaches it, payloads truncated (set " + uiTokenEnv + " to guard it and allow retrying and purging dead events)"
	switch {
	case cfg.Token != "" && cfg.OpenReads:
		mode = "reads open to whoever reaches it, payloads truncated; full payloads and writes to an operator who signs in with " + uiTokenEnv
	case cfg.Token != "":
		mode = "every page asks for " + uiTokenEnv + " (a sign-in, or HTTP basic auth); writes allowed to an operator who signs in"
	}
	fmt.Fprintf(c.stdout, "bunbox ui: serving http://%s/ (%s)\n", ln.Addr(), mode)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: uiReadHeaderTimeout, ReadTimeout: uiReadTimeout,
		WriteTimeout: uiWriteTimeout, IdleTimeout: uiIdleTimeout}
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
