package outboxtest

import (
	"cmp"
	"database/sql"
	"fmt"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun/driver/pgdriver"
)

// DriverEnv is the environment variable that selects the database/sql driver under bun for every
// connection the test kit opens: "pgdriver" (bun's own, the default) or "pgx" (github.com/jackc/pgx/v5/stdlib).
// `make test` runs the tests once with each.
const DriverEnv = "BUNBOX_TEST_DRIVER"

// Driver names.
const (
	DriverPgdriver = "pgdriver"
	DriverPgx      = "pgx"
)

// Driver returns the driver the test kit opens connections with, from BUNBOX_TEST_DRIVER; it defaults to
// pgdriver. An unknown name is an error that names the variable.
func Driver() (string, error) {
	switch d := cmp.Or(os.Getenv(DriverEnv), DriverPgdriver); d {
	case DriverPgdriver, DriverPgx:
		return d, nil
	default:
		return "", fmt.Errorf("%s=%q: want %q or %q", DriverEnv, d, DriverPgdriver, DriverPgx)
	}
}

// OpenSQL opens a *sql.DB on the PostgreSQL server at url with the driver of BUNBOX_TEST_DRIVER and the
// given extra connection parameters (such as search_path). It does not connect yet.
func OpenSQL(url string, params map[string]any) (*sql.DB, error) {
	driver, err := Driver()
	if err != nil {
		return nil, err
	}
	if driver == DriverPgx {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, fmt.Errorf("parse database URL for pgx: %w", err)
		}
		cfg.ConnectTimeout = 30 * time.Second
		for k, v := range params {
			cfg.RuntimeParams[k] = fmt.Sprint(v)
		}
		return stdlib.OpenDB(*cfg), nil
	}
	opts := []pgdriver.Option{pgdriver.WithDSN(url), pgdriver.WithTimeout(30 * time.Second)}
	if len(params) > 0 {
		opts = append(opts, pgdriver.WithConnParams(params))
	}
	return sql.OpenDB(pgdriver.NewConnector(opts...)), nil
}

// Unconnected returns a *bun.DB on a port nothing listens on: enough for code that must not reach the
// database (option handling, nil checks, registration). It is closed when the test ends.
func Unconnected(tb testing.TB) *bun.DB {
	tb.Helper()
	db := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithAddr("127.0.0.1:1"))), pgdialect.New())
	tb.Cleanup(func() { _ = db.Close() })
	return db
}
