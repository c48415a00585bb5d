package bunx

import (
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
)

// WithSchema makes the Outbox write into the outbox of schema: "schema".outbox_events, qualified and
// quoted in every statement, so neither search_path nor a pooler's session matters. Give the same schema to
// migrate.WithSchema (which creates the tables there), relay.Config.Schema and the rest; several Outboxes
// on one db, each with its schema, write each to its own table (see the README, "Several outboxes, schemas
// per tenant"). With WithPreparedStatements, each schema has its own prepared INSERTs.
//
// schema is 1 to 48 ASCII letters, digits and underscores, not starting with a digit or pg_; case is kept
// ("TenantA" is quoted, so it is not tenanta). Another name makes every Record, Cancel and hook write of
// the Outbox fail with an error naming it; nothing is written. Defaults to "": today's unqualified
// outbox_events, resolved through search_path.
func WithSchema(schema string) Option {
	return func(o *Outbox) {
		names, err := tables.Parse(schema)
		if err != nil {
			o.reg.err = fmt.Errorf("bunx: WithSchema: %w", err)
			return
		}
		o.reg.tables, o.reg.err = names, nil
	}
}
