package bunx

import (
	"errors"
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
)

// WithSchema makes the Outbox write into the outbox of schema: "schema".outbox_events, qualified and
// quoted in every statement, so neither search_path nor a pooler's session matters. Give the same schema to
// migrate.WithSchema (which creates the tables there), relay.Config.Location and the rest; several Outboxes
// on one db, each with its schema, write each to its own table (see docs/tenants.md). With
// WithPreparedStatements, each schema has its own prepared INSERTs.
//
// schema is 1 to 48 ASCII letters, digits and underscores, not starting with a digit or pg_; case is kept
// ("TenantA" is quoted, so it is not tenanta). Another name makes every Record, Cancel and hook write of
// the Outbox fail with an error naming it; nothing is written. Defaults to "": today's unqualified
// outbox_events, resolved through search_path.
func WithSchema(schema string) Option {
	return func(o *Outbox) { o.reg.setTables(schema, o.reg.prefix) }
}

// WithTablePrefix makes the Outbox write into the outbox whose table names start with prefix:
// orders_outbox_events for "orders_" (in the schema of WithSchema, if any), so that several outboxes live
// in one schema. Give the same prefix to migrate.WithTablePrefix (which creates the tables, their indexes
// and sequence under the prefixed names), relay.Config.Location and the rest (see docs/tenants.md).
//
// prefix is 1 to 24 lowercase ASCII letters, digits and underscores, not starting with a digit or pg_,
// and with WithSchema's schema it must leave the NOTIFY channel (bunbox_outbox:<schema>:<prefix>) within
// 63 bytes. Another prefix makes every Record, Cancel and hook write of the Outbox fail with an error
// naming it; nothing is written. Defaults to "": today's table names.
func WithTablePrefix(prefix string) Option {
	return func(o *Outbox) { o.reg.setTables(o.reg.schema, prefix) }
}

// setTables sets the table names of schema and prefix, or the error of the option that makes them
// invalid (and clears that of an earlier, replaced one).
func (r *registry) setTables(schema, prefix string) {
	r.schema, r.prefix = schema, prefix
	names, err := tables.New(schema, prefix)
	if errors.Is(r.err, tables.ErrInvalidSchema) || errors.Is(r.err, tables.ErrInvalidTablePrefix) {
		r.err = nil
	}
	switch {
	case errors.Is(err, tables.ErrInvalidSchema):
		r.err = fmt.Errorf("bunx: WithSchema: %w", err)
	case err != nil:
		r.err = fmt.Errorf("bunx: WithTablePrefix: %w", err)
	default:
		r.tables = names
	}
}
