package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/bunbox/bunbox/connect"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/relay"
)

// Run a relay next to the service: it forwards every committed outbox row to asynq until ctx ends.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// TLS as the URL's sslmode says: ...?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem in production.
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err) // the error shows the URL with its password masked
	}
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		panic(err)
	}
	// Optional: wake idle relays at commit instead of at the next poll.
	if err := relay.EnableNotifyTrigger(ctx, db); err != nil {
		panic(err)
	}
	redisOpt, err := connect.Redis(os.Getenv("REDIS_URL")) // e.g. redis://:password@127.0.0.1:6379/0
	if err != nil {
		panic(err)
	}
	r, err := relay.New(db, redisOpt, relay.Config{
		Logger: slog.Default(),
	})
	if err != nil {
		panic(err) // Redis does not answer, or the schema is missing
	}
	defer r.Close()
	if err := r.Run(ctx); err != nil { // blocks until ctx is done; nil on a clean stop
		panic(err)
	}
}

// Load the settings from OUTBOX_* variables; New applies the defaults to what is unset.
func ExampleConfigFromEnv() {
	os.Setenv("OUTBOX_BATCH_SIZE", "200")
	os.Setenv("OUTBOX_POLL_INTERVAL", "250ms")
	defer os.Unsetenv("OUTBOX_BATCH_SIZE")
	defer os.Unsetenv("OUTBOX_POLL_INTERVAL")
	cfg, err := relay.ConfigFromEnv()
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.BatchSize, cfg.PollInterval)
	// Output: 200 250ms
}

// The operator lists the dead events and, once the cause is fixed, puts them back in line.
func ExampleRetryDead() {
	ctx := context.Background()
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err)
	}
	dead, err := relay.DeadEvents(ctx, db, 50)
	if err != nil {
		panic(err)
	}
	for _, ev := range dead {
		fmt.Println(ev.EventID, ev.Name, ev.Attempts, ev.LastError)
		if _, err := relay.RetryDead(ctx, db, ev.EventID); err != nil {
			panic(err)
		}
	}
}
