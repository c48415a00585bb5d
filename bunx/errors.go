package bunx

import (
	"errors"
	"fmt"
)

// ErrDuplicateEvent is wrapped by the error of a Record or hook whose event id is already in the outbox
// (or given twice to one Record); the error's message names the id.
var ErrDuplicateEvent = errors.New("bunx: duplicate event id")

// duplicateEventError returns the error of an event id already in the outbox: ErrDuplicateEvent naming it.
func duplicateEventError(id fmt.Stringer) error {
	return fmt.Errorf("%w %s: an event with this id is already in the outbox", ErrDuplicateEvent, id)
}
