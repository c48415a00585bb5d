package admin

import (
	"context"
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
)

// schemaKey is the context key of WithSchema.
type schemaKey struct{}

// WithSchema returns a context under which every function of the package reads and changes the outbox in
// schema ("schema".outbox_events, qualified and quoted, no search_path needed) rather than the one that
// search_path finds: one context per outbox of a schema-per-tenant setup (see the README, "Several
// outboxes, schemas per tenant"). A schema name bunbox refuses (it takes 1 to 48 ASCII letters, digits and
// underscores, not starting with a digit or pg_; case is kept) makes every function fail with an error
// naming it. Without it (or with ""), the functions use today's unqualified outbox_events.
func WithSchema(ctx context.Context, schema string) context.Context {
	return context.WithValue(ctx, schemaKey{}, schema)
}

// namesOf returns the table names of ctx's schema (WithSchema).
func namesOf(ctx context.Context) (tables.Names, error) {
	s, _ := ctx.Value(schemaKey{}).(string)
	names, err := tables.Parse(s)
	if err != nil {
		return tables.Names{}, fmt.Errorf("admin: WithSchema: %w", err)
	}
	return names, nil
}
