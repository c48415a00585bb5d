package outboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// ExampleRedisDB is the Redis database the examples enqueue into, away from the tests' queues in database 0.
const ExampleRedisDB = 9

// Examples wraps m for the TestMain of a package whose Example functions need the servers:
//
//	goleak.VerifyTestMain(outboxtest.Examples(m))
//
// Its Run creates a fresh schema migrated with bunbox's migrations, points DATABASE_URL at it (TEST_DATABASE_URL
// with search_path set) and REDIS_URL at the test Redis (database ExampleRedisDB), runs m, restores both variables
// and drops the schema. The examples read the same variables an application would. Under -short it only runs m:
// `make test/short` skips the examples.
func Examples(m *testing.M) interface{ Run() int } { return examples{m} }

type examples struct{ m *testing.M }

func (e examples) Run() int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		return e.m.Run()
	}
	drop, err := exampleEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "outboxtest: prepare the examples' database:", err)
		return 1
	}
	code := e.m.Run()
	if err := drop(); err != nil {
		fmt.Fprintln(os.Stderr, "outboxtest:", err)
	}
	return code
}

// exampleEnv creates and migrates the examples' schema, sets the variables, and returns what undoes both.
func exampleEnv() (func() error, error) {
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "bunbox_example_" + hex.EncodeToString(b[:])
	admin, err := openPlain(DatabaseURL(), nil)
	if err != nil {
		return nil, err
	}
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("create schema: %w", err)
	}
	dropSchema := func() error {
		defer admin.Close()
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", name, err)
		}
		return nil
	}
	db, err := openPlain(DatabaseURL(), map[string]any{"search_path": name})
	if err == nil {
		err = bunboxmigrate.Up(ctx, db)
		_ = db.Close()
	}
	if err != nil {
		_ = dropSchema()
		return nil, fmt.Errorf("migrate schema %s: %w", name, err)
	}
	u, err := url.Parse(DatabaseURL())
	if err != nil {
		_ = dropSchema()
		return nil, fmt.Errorf("parse TEST_DATABASE_URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	restore := setenv(map[string]string{
		"DATABASE_URL": u.String(),
		"REDIS_URL":    fmt.Sprintf("redis://%s/%d", RedisAddr(), ExampleRedisDB),
	})
	return func() error { restore(); return dropSchema() }, nil
}

// openPlain opens the test database outside a test and checks that it answers.
func openPlain(url string, params map[string]any) (*bun.DB, error) {
	sqldb, err := OpenSQL(url, params)
	if err != nil {
		return nil, err
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("PostgreSQL at %s does not answer (%w): run the tests with `make test`, which starts it", url, err)
	}
	return db, nil
}

// setenv sets the variables and returns what puts the previous values back.
func setenv(vars map[string]string) func() {
	old := map[string]*string{}
	for k, v := range vars {
		if prev, ok := os.LookupEnv(k); ok {
			old[k] = &prev
		} else {
			old[k] = nil
		}
		_ = os.Setenv(k, v)
	}
	return func() {
		for k, prev := range old {
			if prev == nil {
				_ = os.Unsetenv(k)
			} else {
				_ = os.Setenv(k, *prev)
			}
		}
	}
}
