package ui

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/configcheck"
	"github.com/bunbox/bunbox/internal/tables"
)

// Defaults applied by New to the zero fields of a Config.
const (
	// ListLimitDefault is how many rows each list of the page shows.
	ListLimitDefault = 50
	// MinTokenLength is the shortest token New accepts: a token guards writes, so it must not be guessable.
	MinTokenLength = 16
)

// Config tunes a Handler. The zero value serves a read-only page on the outbox table alone.
type Config struct {
	// Token, when set, lets an operator who signs in with it retry and purge dead events. At least
	// MinTokenLength bytes. Defaults to none: the page is read-only and every write is refused.
	Token string
	// Redis, when set, adds what asynq holds per queue (and each event's task) to the page. Defaults to
	// none: the page shows the outbox table only and says so.
	Redis asynq.RedisConnOpt
	// Logger receives a line for every write (who, what, how many) and every refused write.
	// Defaults to a logger that writes Info and above to stderr.
	Logger *slog.Logger
	// ListLimit is how many rows each list shows, 1 to 1000. Defaults to 50.
	ListLimit int
	// Schema is the schema of the outbox the page shows and changes ("tenant_a" for
	// "tenant_a".outbox_events and its leases, as relay.Config.Schema): one Handler per outbox. 1 to 48
	// ASCII letters, digits and underscores, not starting with a digit or pg_; case is kept. Defaults to
	// "": today's unqualified tables.
	Schema string
	// TablePrefix is the prefix of the outbox's table names ("orders_" for orders_outbox_events and its
	// leases table, as relay.Config.TablePrefix), for an outbox of several in one schema. 1 to 24
	// lowercase ASCII letters, digits and underscores, not starting with a digit or pg_. Defaults to "":
	// today's table names.
	TablePrefix string
}

func (c Config) withDefaults() Config {
	c.ListLimit = cmp.Or(c.ListLimit, ListLimitDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return c
}

// ErrInvalidConfig is wrapped by the errors of a Config that cannot work; the message names the field.
var ErrInvalidConfig = errors.New("ui: invalid config")

func (c Config) validate() error {
	var p configcheck.Problems
	p.Check(c.Token == "" || len(c.Token) >= MinTokenLength, "Token must be at least %d bytes, got %d", MinTokenLength, len(c.Token))
	switch _, err := tables.New(c.Schema, c.TablePrefix); {
	case errors.Is(err, tables.ErrInvalidSchema):
		p.Add(fmt.Errorf("Schema: %w", err))
	case err != nil:
		p.Add(fmt.Errorf("TablePrefix: %w", err))
	}
	p.Check(c.ListLimit >= 1 && c.ListLimit <= 1000, "ListLimit must be between 1 and 1000, got %d", c.ListLimit)
	return p.Err(ErrInvalidConfig)
}
