package model

import (
	"errors"
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
)

// Location says where one outbox lives and how its payloads are stored: the PostgreSQL schema of its
// tables, the prefix of their names, and the codec of its payloads. Every part of bunbox that touches an
// outbox takes the same value: bunx.WithLocation, worker.WithLocation, migrate.WithLocation,
// relay.Config.Location, relay.ReconcilerConfig.Location, admin.New, ui.Config.Location and
// bunboxtest.Outbox; the CLI reads it from OUTBOX_SCHEMA, OUTBOX_TABLE_PREFIX and OUTBOX_CODEC_KEYS_FILE.
//
// The zero Location is the default outbox: the tables outbox_events, inbox_events, bunbox_leases and
// bunbox_stream found through search_path, payloads stored as the JSON they are.
//
//	loc := model.Location{Schema: "billing", Codec: codec}
//	ob := bunx.New(db, bunx.WithLocation(loc))
//	r, err := relay.New(db, redisOpt, relay.Config{Location: loc})
type Location struct {
	// Schema is the schema of the outbox's tables: "tenant_a" puts them in "tenant_a", qualified and
	// quoted in every statement, so that no search_path is needed (which a transaction pooler does not
	// keep) and several outboxes live in one database, a relay each. 1 to 48 ASCII letters, digits and
	// underscores, not starting with a digit or pg_; case is kept. Defaults to "": the unqualified names,
	// found through search_path.
	Schema string
	// TablePrefix is the prefix of the outbox's table names: "orders_" names orders_outbox_events,
	// orders_inbox_events, orders_bunbox_leases and orders_bunbox_stream (in Schema, if set), with their
	// own indexes, id sequence, advisory locks and NOTIFY channel, so that several outboxes live in one
	// schema. 1 to 24 lowercase ASCII letters, digits and underscores, not starting with a digit or pg_;
	// with Schema, the NOTIFY channel bunbox_outbox:<schema>:<prefix> must fit 63 bytes. Defaults to "".
	TablePrefix string
	// Codec encodes the payloads the Outbox writes (compressed, encrypted or both) and decodes them where
	// they are read: by the relay before the enqueue, by the inbox before the handler, by bunboxtest.
	// Every part of one outbox takes the same Codec (or the keys to decode it). Defaults to nil: payloads
	// are stored as the JSON they are.
	Codec *Codec
}

// Validate reports whether the schema and the table prefix are names bunbox accepts, with an error that
// names the bad field (Location.Schema or Location.TablePrefix) and why.
func (l Location) Validate() error {
	_, err := tables.New(l.Schema, l.TablePrefix)
	switch {
	case errors.Is(err, tables.ErrInvalidSchema):
		return fmt.Errorf("model: Location.Schema: %w", err)
	case err != nil:
		return fmt.Errorf("model: Location.TablePrefix: %w", err)
	}
	return nil
}
