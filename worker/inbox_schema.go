package worker

import (
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
)

// WithInboxSchema makes the Inbox (and its InboxCleaner) record handled events in the inbox of schema:
// "schema".inbox_events, qualified and quoted in every statement, so neither search_path nor a pooler's
// session matters. Give it the schema of the outbox whose events the handlers take (migrate.WithSchema,
// bunx.WithSchema, relay.Config.Schema); see the README, "Several outboxes, schemas per tenant".
//
// schema is 1 to 48 ASCII letters, digits and underscores, not starting with a digit or pg_; case is kept.
// Another name makes every task of the Inbox fail (logged at Error, naming it) and NewInboxCleaner refuse
// it. Defaults to "": today's unqualified inbox_events, resolved through search_path.
func WithInboxSchema(schema string) Option {
	return func(o *options) {
		names, err := tables.Parse(schema)
		if err != nil {
			o.err = fmt.Errorf("worker: WithInboxSchema: %w", err)
			return
		}
		o.tables, o.err = names, nil
	}
}
