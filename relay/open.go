package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/tables"
)

// openTimeout bounds the checks of New and NewReconciler, which take no context; NewContext and
// NewReconcilerContext use the caller's instead.
const openTimeout = 15 * time.Second

// config is what New and NewReconciler do with their Config: apply the defaults, then validate (errors
// that wrap ErrInvalidConfig and name the field).
type config[C any] interface {
	withDefaults() C
	validate() error
	tables() tables.Names
}

// open is the start that NewContext and NewReconcilerContext share: a database, a valid configuration
// with its defaults, the outbox table (in the configuration's schema). fn names the constructor in its errors.
func open[C config[C]](ctx context.Context, fn string, db *bun.DB, cfg C) (C, error) {
	if db == nil {
		var zero C
		return zero, fmt.Errorf("relay: %s: db is nil", fn)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return cfg, err
	}
	return cfg, checkSchema(ctx, db, cfg.tables())
}

// pingOpened checks, within ctx, that the Redis of a new Relay or Reconciler answers: through the go-redis
// client it made, or else the Enqueuer's Ping; with neither there is nothing to check.
func pingOpened(ctx context.Context, rdb redis.UniversalClient, p pinger) error {
	var err error
	switch {
	case rdb != nil:
		err = rdb.Ping(ctx).Err()
	case p != nil:
		done := make(chan error, 1)
		go func() { done <- p.Ping() }() // Ping takes no context: do not wait past ctx
		select {
		case err = <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("relay: Redis does not answer: %w", err)
	}
	return nil
}
