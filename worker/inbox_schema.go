package worker

import (
	"errors"
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
)

// WithInboxSchema makes the Inbox (and its InboxCleaner) record handled events in the inbox of schema:
// "schema".inbox_events, qualified and quoted in every statement, so neither search_path nor a pooler's
// session matters. Give it the schema of the outbox whose events the handlers take (migrate.WithSchema,
// bunx.WithSchema, relay.Config.Location); see docs/tenants.md.
//
// schema is 1 to 48 ASCII letters, digits and underscores, not starting with a digit or pg_; case is kept.
// Another name makes every task of the Inbox fail (logged at Error, naming it) and NewInboxCleaner refuse
// it. Defaults to "": today's unqualified inbox_events, resolved through search_path.
func WithInboxSchema(schema string) Option {
	return func(o *options) { o.setTables(schema, o.prefix) }
}

// WithInboxTablePrefix makes the Inbox (and its InboxCleaner) record handled events in the inbox whose
// name starts with prefix: orders_inbox_events for "orders_" (in WithInboxSchema's schema, if any), so
// that the outboxes of one schema have an inbox each. Give it the prefix of the outbox whose events the
// handlers take (migrate.WithTablePrefix, bunx.WithTablePrefix, relay.Config.Location).
//
// prefix is 1 to 24 lowercase ASCII letters, digits and underscores, not starting with a digit or pg_
// (and with the schema, the outbox's NOTIFY channel must fit 63 bytes). Another prefix makes every task
// of the Inbox fail (logged at Error, naming it) and NewInboxCleaner refuse it. Defaults to "": today's
// inbox_events.
func WithInboxTablePrefix(prefix string) Option {
	return func(o *options) { o.setTables(o.schema, prefix) }
}

// setTables sets the inbox's names of schema and prefix, or the error of the option that makes them
// invalid (and clears that of an earlier, replaced one).
func (o *options) setTables(schema, prefix string) {
	o.schema, o.prefix = schema, prefix
	names, err := tables.New(schema, prefix)
	if errors.Is(o.err, tables.ErrInvalidSchema) || errors.Is(o.err, tables.ErrInvalidTablePrefix) {
		o.err = nil
	}
	switch {
	case errors.Is(err, tables.ErrInvalidSchema):
		o.err = fmt.Errorf("worker: WithInboxSchema: %w", err)
	case err != nil:
		o.err = fmt.Errorf("worker: WithInboxTablePrefix: %w", err)
	default:
		o.tables = names
	}
}
