package admin

import (
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// Outbox is the operator's handle on one outbox: the outbox at a model.Location, read and changed through
// one bun.IDB. Its methods are plain SQL, so they run from any process, with or without a relay. It is
// safe for concurrent use as far as its bun.IDB is (a *bun.DB is; a bun.Tx is not).
type Outbox struct {
	db    bun.IDB
	names tables.Names
}

// New returns the handle on the outbox at loc (see model.Location; loc.Codec is not used: the operator's
// queries never decode a payload), whose methods run on db. Give it a *bun.DB, or a bun.Tx to run
// several of them in one transaction (then use the handle only inside it). The zero Location is the
// outbox whose unqualified outbox_events search_path finds; loc.Schema and loc.TablePrefix name another
// one ("tenant_a".orders_outbox_events), qualified and quoted in every statement, so no search_path is
// needed: one handle per outbox of a multi-tenant setup (see docs/tenants.md).
//
// A nil db, or a Location that loc.Validate refuses, is an error naming it; nothing runs.
func New(db bun.IDB, loc model.Location) (*Outbox, error) {
	if db == nil {
		return nil, errors.New("admin: New: db must not be nil")
	}
	if err := loc.Validate(); err != nil {
		return nil, fmt.Errorf("admin: New: %w", err)
	}
	names, err := tables.New(loc.Schema, loc.TablePrefix)
	if err != nil {
		return nil, fmt.Errorf("admin: New: %w", err)
	}
	return &Outbox{db: db, names: names}, nil
}
