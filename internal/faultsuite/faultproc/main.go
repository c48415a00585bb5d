// Command faultproc holds the processes of the fault-injection suite (package faultsuite): one binary,
// one subcommand per role. Each writes a ledger of what it did, one line per fact, to files in -dir that
// survive a SIGKILL (every line is one write(2) on an O_APPEND file).
//
//	faultproc producer -db URL -dir DIR -seed N -duration 60s -rate 40
//	faultproc relay    -db URL -redis ADDR -dir DIR -id r0
//	faultproc worker   -db URL -redis ADDR -dir DIR -id w0 -seed N
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: faultproc producer|relay|worker [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "producer":
		err = runProducer(ctx, args)
	case "relay":
		err = runRelay(ctx, args)
	case "worker":
		err = runWorker(ctx, args)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "faultproc %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// common are the flags every role takes.
type common struct {
	db    string
	redis string
	dir   string
	id    string
	seed  int64
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.db, "db", "", "PostgreSQL URL")
	fs.StringVar(&c.redis, "redis", "", "Redis host:port")
	fs.StringVar(&c.dir, "dir", "", "directory of the ledger files")
	fs.StringVar(&c.id, "id", "", "name of this process in the ledger")
	fs.Int64Var(&c.seed, "seed", 1, "random seed")
}

func logger(id string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With(slog.String("proc", id))
}

// openDB opens a small pool; it does not ping, so a process can start while PostgreSQL is down. The
// driver is pgdriver, or pgx when BUNBOX_TEST_DRIVER=pgx (as for the test kit).
func openDB(url string, maxConns int) *bun.DB {
	var sqldb *sql.DB
	if os.Getenv("BUNBOX_TEST_DRIVER") == "pgx" {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "faultproc: parse database URL:", err)
			os.Exit(2)
		}
		cfg.ConnectTimeout = 5 * time.Second
		sqldb = stdlib.OpenDB(*cfg)
	} else {
		sqldb = sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(url), pgdriver.WithTimeout(5*time.Second)))
	}
	sqldb.SetMaxOpenConns(maxConns)
	sqldb.SetConnMaxIdleTime(30 * time.Second)
	return bun.NewDB(sqldb, pgdialect.New())
}

// ledger appends lines to a file; each line is a single write, so a SIGKILL never leaves half a line.
type ledger struct {
	mu sync.Mutex
	f  *os.File
}

func openLedger(path string) (*ledger, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &ledger{f: f}, nil
}

func (l *ledger) printf(format string, args ...any) {
	line := fmt.Sprintf(format+"\n", args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.WriteString(line); err != nil {
		fmt.Fprintf(os.Stderr, "ledger write: %v\n", err)
		os.Exit(3) // a ledger with holes would make the checks lie
	}
}

func (l *ledger) close() error { return l.f.Close() }

// retry calls f until it succeeds or ctx ends, pausing between attempts: what a supervisor does for a
// process whose dependencies are not up yet.
func retry[T any](ctx context.Context, log *slog.Logger, what string, f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err == nil {
			return v, nil
		}
		log.Warn("start failed, retrying", slog.String("what", what), slog.Any("err", err))
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			var zero T
			return zero, ctx.Err()
		case <-t.C:
		}
	}
}
