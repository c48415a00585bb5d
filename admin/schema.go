package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
)

// schemaKey is the context key of WithSchema.
type schemaKey struct{}

// tablePrefixKey is the context key of WithTablePrefix.
type tablePrefixKey struct{}

// WithSchema returns a context under which every function of the package reads and changes the outbox in
// schema ("schema".outbox_events, qualified and quoted, no search_path needed) rather than the one that
// search_path finds: one context per outbox of a schema-per-tenant setup (see docs/tenants.md).
// A schema name bunbox refuses (it takes 1 to 48 ASCII letters, digits and
// underscores, not starting with a digit or pg_; case is kept) makes every function fail with an error
// naming it. Without it (or with ""), the functions use today's unqualified outbox_events.
func WithSchema(ctx context.Context, schema string) context.Context {
	return context.WithValue(ctx, schemaKey{}, schema)
}

// WithTablePrefix returns a context under which every function of the package reads and changes the
// outbox whose table names start with prefix (orders_outbox_events for "orders_", in WithSchema's schema
// if ctx has one), as migrate.WithTablePrefix named them: one context per outbox of a schema. A prefix
// bunbox refuses (it takes 1 to 24 lowercase ASCII letters, digits and underscores, not starting with a
// digit or pg_) makes every function fail with an error naming it. Without it (or with ""), the
// functions use today's table names.
func WithTablePrefix(ctx context.Context, prefix string) context.Context {
	return context.WithValue(ctx, tablePrefixKey{}, prefix)
}

// namesOf returns the table names of ctx's schema and prefix (WithSchema, WithTablePrefix).
func namesOf(ctx context.Context) (tables.Names, error) {
	s, _ := ctx.Value(schemaKey{}).(string)
	p, _ := ctx.Value(tablePrefixKey{}).(string)
	names, err := tables.New(s, p)
	switch {
	case errors.Is(err, tables.ErrInvalidSchema):
		return tables.Names{}, fmt.Errorf("admin: WithSchema: %w", err)
	case err != nil:
		return tables.Names{}, fmt.Errorf("admin: WithTablePrefix: %w", err)
	}
	return names, nil
}
