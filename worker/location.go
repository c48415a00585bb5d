package worker

import (
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// WithLocation makes the Inbox (and its InboxCleaner) serve the outbox at loc (see model.Location): it
// records handled events in loc's inbox ("tenant_a".orders_inbox_events for Schema "tenant_a" and
// TablePrefix "orders_"), qualified and quoted in every statement, so neither search_path nor a pooler's
// session matters, and it decodes with loc.Codec the payloads that the Outbox's codec encoded and the
// relay passed through encoded (relay.Config.Location.Codec nil): its handlers, and HandleJSON, get the
// plain payload (see DecodeTask). Give it the Location of the outbox whose events the handlers take
// (bunx.WithLocation, migrate.WithLocation, relay.Config.Location); see docs/tenants.md. The Codec needs
// the Keyring of every key the tasks it handles may name.
//
// A Location that loc.Validate refuses makes every task of the Inbox fail (logged at Error, naming the
// bad field) and NewInboxCleaner refuse it. Defaults to the zero Location: the unqualified inbox_events,
// resolved through search_path, and no Codec: a gzip-compressed payload is still decoded, and an
// encrypted one fails its task with model.ErrNoCodec (asynq retries it).
func WithLocation(loc model.Location) Option {
	return func(o *options) {
		o.err, o.codec, o.tables = nil, loc.Codec, tables.Names{}
		if err := loc.Validate(); err != nil {
			o.err = fmt.Errorf("worker: WithLocation: %w", err)
			return
		}
		o.tables, _ = tables.New(loc.Schema, loc.TablePrefix)
	}
}
