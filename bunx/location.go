package bunx

import (
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// WithLocation makes the Outbox write into the outbox at loc (see model.Location): its Schema and
// TablePrefix name the table ("tenant_a".orders_outbox_events), qualified and quoted in every statement so
// that neither search_path nor a pooler's session matters, and its Codec encodes the payloads written.
// Give the same Location to migrate.WithLocation (which creates the tables), relay.Config.Location,
// worker.WithLocation, admin.New and the rest; several Outboxes on one db, each with its Location, write
// each to its own table (see docs/tenants.md). With WithPreparedStatements, each table has its own prepared
// INSERTs.
//
// With a Codec (see model.Codec: compressed above a size, encrypted at rest, or both), an encoded payload
// is written as bytes into the payload_encoded column (the payload column then holds JSON null), with its
// encoding and key id in the event's metadata (bunbox-payload-encoding, bunbox-payload-key-id), which the
// relay copies into the task's headers. A payload the Codec leaves as it is (a small one, with compression
// only) is written as plain JSON. The payload is decoded by the relay before it enqueues
// (relay.Config.Location.Codec), or else by the consumer (worker.WithLocation, worker.DecodeTask), which then
// needs the Keyring too; an encrypted payload then stays encrypted in Redis as well. WithMaxPayloadSize then
// limits the payload as written (after encoding), and the payload before encoding may be up to the Codec's
// own limit (model.MaxDecodedSize, 1 MiB by default): a payload over it fails Record, naming the event and
// the limit, however small it compresses. The two metadata keys count towards the metadata limits. An
// event of bytes (model.NewBytesEvent) is encoded like a JSON one; bytes the codec leaves as they are go
// into payload_encoded as they are, with no encoding key. The caller's events are not changed: the Outbox
// writes encoded copies.
//
// A Location that loc.Validate refuses makes every Record, Cancel and hook write of the Outbox fail with
// an error naming the bad field; nothing is written. Defaults to the zero Location: the unqualified
// outbox_events, resolved through search_path, and payloads written as JSON, queryable with PostgreSQL's
// jsonb operators.
func WithLocation(loc model.Location) Option {
	return func(o *Outbox) { o.reg.setLocation(loc) }
}

// setLocation sets the table names and codec of loc, or the error that makes loc invalid (and clears
// that of an earlier, replaced one).
func (r *registry) setLocation(loc model.Location) {
	r.err, r.codec = nil, loc.Codec
	if err := loc.Validate(); err != nil {
		r.err = fmt.Errorf("bunx: WithLocation: %w", err)
		return
	}
	r.tables, _ = tables.New(loc.Schema, loc.TablePrefix)
}
