// Package configcheck is the one way bunbox's constructors validate a Config (relay.Config,
// relay.ReconcilerConfig, worker.InboxCleanerConfig, ui.Config): after the defaults are applied, every
// problem is collected, each naming its field ("BatchSize must be between 1 and 10000, got 0"), and all
// are reported together, wrapped by the caller's sentinel or prefix.
package configcheck

import (
	"errors"
	"fmt"
)

// Problems collects what is wrong with a configuration. The zero value is ready to use.
type Problems struct {
	errs []error
}

// Check records the problem format describes unless ok. The message starts with the field's name.
func (p *Problems) Check(ok bool, format string, args ...any) {
	if !ok {
		p.errs = append(p.errs, fmt.Errorf(format, args...))
	}
}

// Add records err, a problem found by a check of its own (nil: none).
func (p *Problems) Add(err error) {
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

// Prefixed records each of errs with prefix before its message (a nested Config's field path, such as
// "Reconciler.").
func (p *Problems) Prefixed(prefix string, errs []error) {
	for _, err := range errs {
		p.errs = append(p.errs, fmt.Errorf("%s%w", prefix, err))
	}
}

// List returns the problems recorded, in order.
func (p *Problems) List() []error { return p.errs }

// Err returns nil without problems, else sentinel wrapping all of them: "<sentinel>: <problem>\n<problem>".
func (p *Problems) Err(sentinel error) error {
	if err := errors.Join(p.errs...); err != nil {
		return fmt.Errorf("%w: %w", sentinel, err)
	}
	return nil
}
