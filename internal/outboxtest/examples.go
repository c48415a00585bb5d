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

	"github.com/bunbox/bunbox/model"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// ExampleRedisDB is the Redis database the examples enqueue into, away from the tests' queues in database 0.
const ExampleRedisDB = 9

// Examples wraps m for the TestMain of a package whose Example functions need the servers:
//
//	goleak.VerifyTestMain(outboxtest.Examples(m))
//
// Its Run creates a fresh schema migrated with bunbox's migrations, points DATABASE_URL at it (TEST_DATABASE_URL
// with search_path set) and REDIS_URL at the test Redis (database ExampleRedisDB), runs m, restores both variables
// and drops the schema. The examples read the same variables an application would. Under -short, or when
// PostgreSQL (or, for ExamplesRedisDB, Redis) does not answer, it runs m with -skip '^Example' (unless -skip is given): the package's
// examples need the servers.
func Examples(m *testing.M) interface{ Run() int } { return examples{m: m, redisDB: ExampleRedisDB} }

// ExamplesRedisDB is Examples with REDIS_URL on Redis database redisDB, which it empties first: give it a
// database that no other package uses, for examples whose workers must not see other packages' tasks.
func ExamplesRedisDB(m *testing.M, redisDB int) interface{ Run() int } {
	return examples{m: m, redisDB: redisDB, flush: true}
}

type examples struct {
	m       *testing.M
	redisDB int
	flush   bool
}

func (e examples) Run() int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() { // no servers: skip the examples, unless -skip says otherwise
		skipExamples()
		return e.m.Run()
	}
	drop, err := exampleEnv(e.redisDB, e.flush)
	if err != nil {
		// No servers, e.g. a fuzz run (make test/fuzz) or -run for tests that need none: the examples are
		// skipped, and a test that needs the servers fails on its own with a clear message.
		fmt.Fprintln(os.Stderr, "outboxtest: the examples are skipped: prepare their database:", err)
		skipExamples()
		return e.m.Run()
	}
	code := e.m.Run()
	if err := drop(); err != nil {
		fmt.Fprintln(os.Stderr, "outboxtest:", err)
	}
	return code
}

// skipExamples sets -skip '^Example' unless -skip was given.
func skipExamples() {
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
		_ = f.Value.Set("^Example")
	}
}

// exampleEnv creates and migrates the examples' schema, sets the variables, and returns what undoes both.
func exampleEnv(redisDB int, flush bool) (func() error, error) {
	ctx := context.Background()
	if flush {
		rdb := redis.NewClient(&redis.Options{Addr: RedisAddr(), DB: redisDB})
		err := rdb.FlushDB(ctx).Err()
		_ = rdb.Close()
		if err != nil {
			return nil, fmt.Errorf("empty Redis database %d at %s: %w", redisDB, RedisAddr(), err)
		}
	}
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
		err = migrateUp(ctx, db, model.Location{})
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
		"REDIS_URL":    fmt.Sprintf("redis://%s/%d", RedisAddr(), redisDB),
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
