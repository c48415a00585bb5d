// Command bunbox is the operator's tool for a bunbox outbox: it applies the schema, reports the backlog,
// lists and revives dead events, and runs a standalone relay with Prometheus metrics.
//
//	bunbox migrate up|down -yes|status   apply, roll back or list bunbox's migrations
//	bunbox schema [-format F] [-since M]  print the schema as plain SQL (psql, Atlas), or as a goose or golang-migrate migration
//	bunbox status [-json] [-asynq=false]  pending rows, age of the oldest, published, dead and scheduled counts, per queue and event;
//	                                      asynq's tasks per queue (pending, active, scheduled, retry, archived, completed)
//	bunbox dead list [-limit 100] [-json] the events the relay gave up on
//	bunbox dead retry <event-id>...       put dead events back in line (or -name NAME, or -all)
//	bunbox dead purge -older-than D -yes  delete dead events for good (and/or -name NAME, or -all)
//	bunbox tasks list|run|delete          the archived and retry tasks of bunbox's events in asynq: list, run again, delete
//	bunbox cancel [-wait D] <event-id>... cancel events: never delivered, or taken out of asynq by the relay
//	bunbox reconcile [-window 1h] [-json] one reconciler pass: re-deliver the events whose task Redis lost
//	bunbox stream on|off|status [-json]   turn the snapshot cursor on or off, or show how far behind it is
//	bunbox relay [-metrics-addr ...]      run a relay until SIGINT/SIGTERM, with /metrics, /healthz, /readyz
//	bunbox ui [-addr 127.0.0.1:8080]      the operator page (read-only and open unless BUNBOX_UI_TOKEN is set, which guards it)
//
// The database is DATABASE_URL (or -database-url), opened with connect.Postgres (TLS as libpq's sslmode
// says) over the driver DATABASE_DRIVER (or -database-driver) names: pgdriver (the default) or pgx;
// Redis is REDIS_URL (or -redis-url, any form connect.Redis reads: password, TLS, Sentinel, Cluster),
// else REDIS_ADDR (or -redis-addr); the relay reads its settings from OUTBOX_* (see
// relayenv.Config). No password reaches the output: connection strings are shown redacted. Exit
// codes: 0 success, 1 failure, 2 bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/model"
)

const usage = `usage: bunbox [-database-url URL] [-database-driver pgdriver|pgx] [-redis-url URL | -redis-addr host:port] [-schema S] <command> [arguments]

commands:
  migrate up              apply bunbox's migrations (creates outbox_events)
  migrate down -yes       roll them back: drops outbox_events and every event in it
  migrate status [-json]  list the migrations and whether each is applied
  schema [-format sql|goose|golang-migrate] [-since M] [-dir D] [-version V]
                          print the schema as plain SQL, or as one goose migration; -dir writes the
                          file(s) (golang-migrate: V_bunbox.up.sql and .down.sql); -since M: only the
                          migrations after M, the upgrade of a schema that has M. Every statement is
                          re-runnable, so the output also applies over any older bunbox schema
  status [-json] [-asynq=false]
                          pending rows (streamed rows waiting included), age of the oldest pending row,
                          published, dead and scheduled counts, the stream's state,
                          and pending and dead per queue and event name; then asynq's tasks per queue from
                          Redis (pending, active, scheduled, retry, archived, completed: the handlers'
                          failures); -asynq=false reads PostgreSQL only
  dead list [-limit N] [-json]
                          list dead events, oldest first
  dead retry <event-id>…  put dead events back in line for the relay
  dead retry -name NAME…  the same for every dead event of a name (repeat -name), or -all for all
  dead purge -older-than D [-name NAME…] -yes
                          delete dead events for good: dead longer than D and/or of a name, or -all;
                          without -yes it says how many it would delete
  tasks list [-state archived|retry] [-name NAME…] [-limit N] [-json] [<event-id>…]
                          the tasks of bunbox's events that asynq archived (handler failed on its last
                          attempt) or retries, newest failure first; other tasks in the queues are not shown
  tasks run <event-id>…|-name NAME…|-all [-state S]
                          put them back in their queue: asynq runs them next
  tasks delete <event-id>…|-name NAME…|-all [-state S] -yes
                          delete them from asynq for good; without -yes it says how many it would delete
  cancel [-wait D] [-json] <event-id>…
                          cancel events in one transaction: one not yet published is never delivered,
                          the relay takes a published one's task out of asynq if it has not run;
                          -wait D waits up to D for the relay's outcome
  reconcile [-window W] [-json]
                          one reconciler pass over the events published within W (default 1h):
                          re-deliver those whose task Redis lost, and list them
  stream on|off           turn the snapshot cursor on or off for the outbox (relay.EnableStream,
                          relay.DisableStream; needs the role that owns the table)
  stream status [-json]   whether the stream is on, its waiting rows, the age of the oldest, the oldest
                          transaction whose rows wait, when a relay last moved the cursor
  relay [-metrics-addr A] run a relay until interrupted, with Prometheus metrics on A/metrics and
                          the probes A/healthz (alive) and A/readyz (PostgreSQL, Redis, schema);
                          it also runs the reconciler, one relay per database at a time
                          (-reconcile=false: off; -reconcile-window W, -reconcile-interval D);
                          -codec-keys-file F (or OUTBOX_CODEC_KEYS_FILE): decode encoded payloads
                          (bunx.WithLocation's Codec) with the keyring file F, lines current=ID and ID=base64 key
  ui [-addr 127.0.0.1:8080] [-redis=false] [-open-reads] [-trust-proxy]
                          serve the operator page: backlog, pending, scheduled and dead events, blocked
                          keys, asynq's queues; read-only and open unless BUNBOX_UI_TOKEN is set, which
                          guards every page (a sign-in, or HTTP basic auth) and allows retry and purge;
                          -open-reads: reads open, payloads truncated; -trust-proxy: believe
                          X-Forwarded-Proto and X-Forwarded-For from a reverse proxy

environment:
  DATABASE_URL  PostgreSQL URL, e.g. postgres://user:pass@host:5432/db?sslmode=verify-full&sslrootcert=ca.pem
  DATABASE_DRIVER
                pgdriver (bun's driver, the default) or pgx (github.com/jackc/pgx/v5/stdlib)
  REDIS_URL     Redis URL for the relay: redis://:pass@host:6379/0, rediss://... (TLS),
                redis-sentinel://host:26379?master=NAME, redis-cluster://host:7000,host:7001
                (OUTBOX_REDIS_URL is read when REDIS_URL is not set)
  REDIS_TLS_CA_FILE
                the CA (PEM) a rediss URL trusts instead of the system's roots, when the URL
                has no ?tls_ca_file=
  REDIS_ADDR    Redis host:port, when REDIS_URL is not set (default 127.0.0.1:6379)
  OUTBOX_SCHEMA the schema of the outbox every command works on (-schema, before or after the
                command): "tenant_a" means "tenant_a".outbox_events and its inbox and leases;
                unset: today's unqualified tables. bunbox migrate up -schema S creates the schema
  OUTBOX_TABLE_PREFIX
                the table prefix of the outbox every command works on (-table-prefix, before or
                after the command): "orders_" means orders_outbox_events, orders_inbox_events,
                orders_bunbox_leases (in -schema, if set); several outboxes in one schema
  OUTBOX_*      relay settings: OUTBOX_BATCH_SIZE, OUTBOX_POLL_INTERVAL, OUTBOX_TASK_RETENTION, ...

exit codes: 0 success, 1 failure, 2 bad usage
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks a command line that is wrong; the message was already printed.
var errUsage = errors.New("usage")

// usageError prints msg and a pointer to the usage to w and returns errUsage.
func usageError(w io.Writer, format string, args ...any) error {
	fmt.Fprintf(w, "bunbox: "+format+"\nRun 'bunbox help' for usage.\n", args...)
	return errUsage
}

// cli is one invocation: its settings and where it writes.
type cli struct {
	databaseURL string
	dbDriver    string // DATABASE_DRIVER: pgdriver or pgx
	redisURL    string // wins over redisAddr
	redisAddr   string
	uiToken     string // BUNBOX_UI_TOKEN, for bunbox ui
	// loc is the one Location every part takes: Schema from -schema (else OUTBOX_SCHEMA), TablePrefix from
	// -table-prefix (else OUTBOX_TABLE_PREFIX), Codec from -codec-keys-file (else OUTBOX_CODEC_KEYS_FILE)
	// where the command decodes payloads (relay, reconcile).
	loc    model.Location
	stdout io.Writer
	stderr io.Writer
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	// A variable written with a trailing newline or a leading space: the white space is not part of the
	// value (a blank REDIS_URL does not hide OUTBOX_REDIS_URL).
	rawGetenv := getenv
	getenv = func(k string) string { return strings.TrimSpace(rawGetenv(k)) }
	c := &cli{stdout: stdout, stderr: stderr, uiToken: getenv(uiTokenEnv),
		loc: model.Location{Schema: getenv(outboxSchemaEnv), TablePrefix: getenv(outboxTablePrefixEnv)}}
	fs := flag.NewFlagSet("bunbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(&c.databaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	fs.StringVar(&c.dbDriver, "database-driver", or(getenv("DATABASE_DRIVER"), string(connect.DriverPgdriver)), "database/sql driver: pgdriver or pgx (default $DATABASE_DRIVER, else pgdriver)")
	fs.StringVar(&c.redisURL, "redis-url", or(getenv("REDIS_URL"), getenv("OUTBOX_REDIS_URL")), "Redis URL, wins over -redis-addr (default $REDIS_URL, else $OUTBOX_REDIS_URL)")
	fs.StringVar(&c.redisAddr, "redis-addr", or(getenv("REDIS_ADDR"), "127.0.0.1:6379"), "Redis host:port (default $REDIS_ADDR)")
	c.schemaFlag(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	for _, v := range []*string{&c.databaseURL, &c.dbDriver, &c.redisURL, &c.redisAddr} {
		*v = strings.TrimSpace(*v) // the flags too
	}
	if d := connect.Driver(c.dbDriver); d != connect.DriverPgdriver && d != connect.DriverPgx {
		_ = usageError(stderr, "-database-driver (DATABASE_DRIVER) is %q: want %q or %q", c.dbDriver, connect.DriverPgdriver, connect.DriverPgx)
		return 2
	}
	err := c.dispatch(ctx, fs.Args())
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "bunbox: %v\n", explain(err))
		return 1
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError(c.stderr, "no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "migrate":
		return c.migrate(ctx, args)
	case "schema":
		return c.schema(args)
	case "status":
		return c.status(ctx, args)
	case "dead":
		return c.dead(ctx, args)
	case "relay":
		return c.relay(ctx, args)
	case "reconcile":
		return c.reconcile(ctx, args)
	case "ui":
		return c.ui(ctx, args)
	case "cancel":
		return c.cancel(ctx, args)
	case "tasks":
		return c.tasks(ctx, args)
	case "stream":
		return c.stream(ctx, args)
	case "help":
		fmt.Fprint(c.stdout, usage)
		return nil
	default:
		return usageError(c.stderr, "unknown command %q", cmd)
	}
}

// flags parses a subcommand's flags; positional arguments are returned.
func (c *cli) flags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(c.stderr)
	if fs.Lookup("schema") == nil {
		c.schemaFlag(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errUsage
	}
	if err := c.checkSchema(); err != nil {
		return nil, err
	}
	return fs.Args(), nil
}

func (c *cli) noArgs(cmd string, rest []string) error {
	if len(rest) > 0 {
		return usageError(c.stderr, "%s takes no arguments, got %q", cmd, rest)
	}
	return nil
}

// open connects to DATABASE_URL with DATABASE_DRIVER.
func (c *cli) open(ctx context.Context) (*bun.DB, error) {
	if c.databaseURL == "" {
		return nil, errors.New("no database: set DATABASE_URL or pass -database-url")
	}
	return connect.Postgres(ctx, c.databaseURL, connect.Options{Driver: connect.Driver(c.dbDriver), MaxOpenConns: 20})
}

// explain adds what to do to errors an operator can fix.
func explain(err error) error {
	if pgerr.Is(err, pgerr.UndefinedTable) {
		return fmt.Errorf("%w\n(the outbox table does not exist: run `bunbox migrate up`)", err)
	}
	return err
}
