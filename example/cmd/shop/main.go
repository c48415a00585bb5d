// Command shop runs bunbox's example shop: its HTTP API, the outbox relay and the asynq worker, together or
// apart, and the demo that `make demo` runs.
//
//	shop api    [-addr 127.0.0.1:8080] [-queue default]   POST /orders, GET /healthz
//	shop relay                                             committed outbox rows -> asynq (OUTBOX_* env)
//	shop worker [-queue default] [-concurrency 20]         handles order.placed: writes the confirmation
//	shop all    [-addr 127.0.0.1:8080] [-queue default]   the three in one process
//	shop demo   [-orders 3000] [-rollback 0.1] ...         places orders, drains, checks, prints a summary
//
// Settings come from the environment: DATABASE_URL (postgres://..., opened with connect.Postgres over
// the driver DATABASE_DRIVER names: pgdriver, the default, or pgx) and
// REDIS_URL (redis://:pass@host:port/db, rediss://, redis-sentinel://, redis-cluster://: see
// connect.Redis) or REDIS_ADDR (host:port), which default to the servers of scripts/devservices.sh. The
// relay also reads OUTBOX_* (see relayenv.Config).
// SIGINT and SIGTERM stop every subcommand gracefully: the library never touches signals, this main does.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/example/shop"
	"github.com/bunbox/bunbox/internal/relayenv"
	"github.com/bunbox/bunbox/relay"
)

const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable"
	defaultRedisAddr   = "127.0.0.1:56379"
)

const usage = `usage: shop <command> [flags]

commands:
  api      serve POST /orders and GET /healthz
  relay    forward committed outbox rows to asynq
  worker   handle order.placed tasks
  all      api, relay and worker in one process
  demo     place a few thousand orders end to end and print what happened

environment:
  DATABASE_URL  PostgreSQL URL (default ` + defaultDatabaseURL + `)
  DATABASE_DRIVER
                pgdriver (bun's driver, the default) or pgx (github.com/jackc/pgx/v5/stdlib)
  REDIS_URL     Redis URL: redis://:pass@host:6379/0, rediss://, redis-sentinel://, redis-cluster://
  REDIS_ADDR    Redis host:port when REDIS_URL is not set (default ` + defaultRedisAddr + `)
  OUTBOX_*      relay settings, e.g. OUTBOX_BATCH_SIZE, OUTBOX_POLL_INTERVAL (relay, all)

Run "shop <command> -h" for the command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is what every command reads from the environment.
type env struct {
	databaseURL    string
	databaseDriver string // pgdriver or pgx; "" means pgdriver
	redisURL       string // wins over redisAddr
	redisAddr      string
}

func readEnv() env {
	return env{
		databaseURL:    cmp.Or(os.Getenv("DATABASE_URL"), defaultDatabaseURL),
		databaseDriver: os.Getenv("DATABASE_DRIVER"),
		redisURL:       os.Getenv("REDIS_URL"),
		redisAddr:      cmp.Or(os.Getenv("REDIS_ADDR"), defaultRedisAddr),
	}
}

// postgres opens DATABASE_URL with DATABASE_DRIVER's driver and opts.
func (e env) postgres(ctx context.Context, opts connect.Options) (*bun.DB, error) {
	switch opts.Driver = connect.Driver(e.databaseDriver); opts.Driver {
	case "", connect.DriverPgdriver, connect.DriverPgx:
		return connect.Postgres(ctx, e.databaseURL, opts)
	default:
		return nil, fmt.Errorf("DATABASE_DRIVER is %q: want %q or %q", e.databaseDriver, connect.DriverPgdriver, connect.DriverPgx)
	}
}

// redis returns the Redis options of REDIS_URL, or else REDIS_ADDR, and how to name that Redis in
// messages, with its password masked.
func (e env) redis() (asynq.RedisConnOpt, string, error) {
	if e.redisURL == "" {
		return asynq.RedisClientOpt{Addr: e.redisAddr}, e.redisAddr, nil
	}
	opt, err := connect.Redis(e.redisURL)
	if err != nil {
		return nil, "", err
	}
	return opt, connect.Redact(e.redisURL), nil
}

// run runs one command and returns the process's exit code: 0 success, 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	var err error
	switch cmd {
	case "api", "relay", "worker", "all":
		err = serve(ctx, cmd, args, readEnv(), stderr)
	case "demo":
		err = demo(ctx, args, readEnv(), stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "shop: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "shop %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// errUsage marks a command line the flag package rejected (it already printed why).
var errUsage = errors.New("usage")

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", fs.Args())
		return errUsage
	}
	return nil
}

// serve runs the api, the relay, the worker or all three until ctx is done.
func serve(ctx context.Context, cmd string, args []string, e env, stderr io.Writer) error {
	fs := flag.NewFlagSet("shop "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "HTTP listen address (api, all)")
	queue := fs.String("queue", "default", "asynq queue of order.placed")
	concurrency := fs.Int("concurrency", 20, "tasks the worker runs at once (worker, all)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	redisOpt, redisName, err := e.redis()
	if err != nil {
		return err
	}
	db, err := e.postgres(ctx, connect.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := shop.Migrate(ctx, db); err != nil {
		return err
	}
	shop.Register(db, *queue) // before db is shared between goroutines

	var parts []func(context.Context) error
	if cmd == "api" || cmd == "all" {
		parts = append(parts, func(ctx context.Context) error { return serveAPI(ctx, *addr, db, logger) })
	}
	if cmd == "relay" || cmd == "all" {
		cfg, err := relayenv.Config()
		if err != nil {
			return err
		}
		cfg.Logger = logger
		r, err := relay.New(db, redisOpt, cfg)
		if err != nil {
			return fmt.Errorf("relay (Redis at %s): %w", redisName, err)
		}
		defer r.Close()
		parts = append(parts, r.Run)
	}
	if cmd == "worker" || cmd == "all" {
		if err := pingRedis(redisOpt, redisName); err != nil {
			return err
		}
		parts = append(parts, func(ctx context.Context) error {
			return shop.RunWorker(ctx, redisOpt, db, shop.WorkerConfig{Queue: *queue, Concurrency: *concurrency, Logger: logger})
		})
	}
	logger.Info("shop started", slog.String("command", cmd), slog.String("queue", *queue))
	err = runAll(ctx, parts...)
	logger.Info("shop stopped", slog.String("command", cmd))
	return err
}

// runAll runs every part until ctx is done or one of them fails, then stops the others and returns the
// first error.
func runAll(ctx context.Context, parts ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(parts))
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			err := p(ctx)
			if err != nil {
				cancel()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var first error
	for err := range errs {
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

func serveAPI(ctx context.Context, addr string, db *bun.DB, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: shop.Handler(db, logger), ReadHeaderTimeout: 10 * time.Second}
	logger.Info("api listening", slog.String("addr", ln.Addr().String()))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

// pingRedis checks that the Redis of opt answers; name is how messages show it (its password masked).
func pingRedis(opt asynq.RedisConnOpt, name string) error {
	c := asynq.NewClient(opt)
	defer c.Close()
	if err := c.Ping(); err != nil {
		return fmt.Errorf("redis at %s does not answer: %w", name, err)
	}
	return nil
}
