package bunx

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// ErrDuplicateEvent is wrapped by the error of a Record or hook whose event id is already in the outbox.
var ErrDuplicateEvent = errors.New("bunx: duplicate event id")

// DuplicateEventError names the event id that is already in the outbox.
type DuplicateEventError struct {
	EventID uuid.UUID
}

func (e *DuplicateEventError) Error() string {
	return fmt.Sprintf("bunx: duplicate event id %s: an event with this id is already in the outbox", e.EventID)
}

// Unwrap makes errors.Is(err, ErrDuplicateEvent) true.
func (e *DuplicateEventError) Unwrap() error { return ErrDuplicateEvent }
