package bunboxtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// Dispatcher is a bunx.Dispatcher that keeps the events dispatched to it in memory, in order, for a unit
// test of service code that takes a Dispatcher. It checks each event as bunx.Outbox.Record does
// (model.Event.Validate, no nil event, no id twice) and keeps none of a call that fails. It writes
// nothing: no transaction, no outbox. The zero value is ready to use; it is safe for concurrent use.
type Dispatcher struct {
	mu     sync.Mutex
	events []*model.Event
}

var _ bunx.Dispatcher = (*Dispatcher)(nil)

// Dispatch records events, or none of them when one is invalid.
func (d *Dispatcher) Dispatch(_ context.Context, events ...*model.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := make(map[uuid.UUID]bool, len(d.events)+len(events))
	for _, ev := range d.events {
		seen[ev.EventID] = true
	}
	for i, ev := range events {
		if ev == nil {
			return fmt.Errorf("bunboxtest: Dispatch: event %d is nil", i)
		}
		if err := ev.Validate(wire.DefaultMaxPayloadSize); err != nil {
			return fmt.Errorf("bunboxtest: Dispatch: event %d (%s): %w", i, ev.Name, err)
		}
		if seen[ev.EventID] {
			return fmt.Errorf("bunboxtest: Dispatch: event %d (%s): %w: %s", i, ev.Name, bunx.ErrDuplicateEvent, ev.EventID)
		}
		seen[ev.EventID] = true
	}
	d.events = append(d.events, events...)
	return nil
}

// Events returns the events dispatched so far, in order, those of the given names only when names are
// given. The slice is the caller's; the events are the ones that were dispatched.
func (d *Dispatcher) Events(names ...string) []*model.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*model.Event
	for _, ev := range d.events {
		if len(names) == 0 || slices.Contains(names, ev.Name) {
			out = append(out, ev)
		}
	}
	return out
}

// Reset forgets the events dispatched so far.
func (d *Dispatcher) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = nil
}

// errNilDB is returned by Events and Drain without a database.
var errNilDB = errors.New("bunboxtest: db is nil: pass the test's *bun.DB or bun.Tx")
