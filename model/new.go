package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/internal/wire"
)

const (
	// maxNameLength is the longest event name, in bytes.
	maxNameLength = 255
)

// ErrInvalidEvent is wrapped by every error that rejects an event: test for it with errors.Is.
var ErrInvalidEvent = errors.New("model: invalid event")

// NewEvent builds an event named name whose payload is the JSON encoding of payload.
//
// A payload that is a json.RawMessage or []byte is taken as JSON text as it is (and must be valid JSON);
// for opaque bytes that are not JSON, use NewBytesEvent. NewEvent refuses what could not be delivered,
// with an error wrapping ErrInvalidEvent that names the field: an empty, over-long or non-printable
// name, a payload that does not marshal to JSON (a channel, a NaN) or is larger than the size limit, an
// invalid queue name, a nil event id, or a delivery option with a nonsense value (see WithProcessAt and
// the options after it), named in the error.
func NewEvent(name string, payload any, opts ...Option) (*Event, error) {
	o := options{queue: DefaultQueue}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.delivery.err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrInvalidEvent, name, o.delivery.err)
	}
	data, err := marshalPayload(payload)
	if err != nil {
		return nil, fmt.Errorf("%w %q: Payload: %w", ErrInvalidEvent, name, err)
	}
	if _, ok := o.metadata[wire.HeaderPayloadFormat]; ok {
		return nil, fmt.Errorf("%w %q: Metadata key %s is set by model.NewBytesEvent, not by WithMetadata",
			ErrInvalidEvent, name, wire.HeaderPayloadFormat)
	}
	return newEvent(name, data, &o)
}

// newEvent builds the event of NewEvent (data is JSON) or NewBytesEvent (o's metadata marks data as bytes).
func newEvent(name string, data []byte, o *options) (*Event, error) {
	if o.delivery.err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrInvalidEvent, name, o.delivery.err)
	}
	var err error
	id := o.eventID
	if !o.eventIDSet {
		if id, err = uuid.NewV7(); err != nil {
			return nil, fmt.Errorf("model: new event id: %w", err)
		}
	}
	if o.orderingKeySet && o.orderingKey == "" {
		return nil, fmt.Errorf("%w %q: OrderingKey must not be empty (leave WithOrderingKey out for no key)", ErrInvalidEvent, name)
	}
	ev := &Event{
		EventID:     id,
		Name:        name,
		Queue:       o.queue,
		Payload:     data,
		Metadata:    o.metadata,
		OrderingKey: o.orderingKey,
	}
	o.delivery.apply(ev)
	// The payload limit is the writer's (bunx.WithMaxPayloadSize), checked when the event is recorded; here
	// only the ceiling that no setting exceeds. The payload is JSON already (json.Marshal wrote it, or
	// validJSON checked it), or bytes that need no check.
	if err := ev.validate(wire.MaxPayloadSizeCeiling, true); err != nil {
		return nil, err
	}
	return ev, nil
}

// Validate reports whether the event can be written and delivered, with an error wrapping ErrInvalidEvent
// that names the field or the limit. maxPayload is the largest payload in bytes: 0 means
// 1 MiB, and more than 64 MiB counts as 64 MiB. Metadata
// is checked against the limits of WithMetadata.
// The bunx package calls it for every event it records, so events built without NewEvent are checked too.
func (e *Event) Validate(maxPayload int) error { return e.validate(maxPayload, false) }

// validate is Validate; isJSON skips checking that the payload is JSON, for a payload known to be.
func (e *Event) validate(maxPayload int, isJSON bool) error {
	if e == nil {
		return fmt.Errorf("%w: the event is nil", ErrInvalidEvent)
	}
	if maxPayload <= 0 {
		maxPayload = wire.DefaultMaxPayloadSize
	}
	maxPayload = min(maxPayload, wire.MaxPayloadSizeCeiling)
	if err := checkName("Name", e.Name, maxNameLength); err != nil {
		return err
	}
	if err := checkName("Queue", e.Queue, wire.MaxQueueLength); err != nil {
		return fmt.Errorf("%w (event %q)", err, e.Name)
	}
	if e.EventID == uuid.Nil {
		return fmt.Errorf("%w %q: EventID must not be the nil UUID", ErrInvalidEvent, e.Name)
	}
	isBytes, err := checkFormat(e)
	if err != nil {
		return err
	}
	if len(e.Payload) == 0 {
		return fmt.Errorf("%w %q: Payload must not be empty (use null for no payload)", ErrInvalidEvent, e.Name)
	}
	if len(e.Payload) > maxPayload {
		return fmt.Errorf("%w %q: Payload is %d bytes, over the limit of %d (the payload limit: bunx.WithMaxPayloadSize)",
			ErrInvalidEvent, e.Name, len(e.Payload), maxPayload)
	}
	if !isJSON && !isBytes && !json.Valid(e.Payload) {
		return fmt.Errorf("%w %q: Payload is not valid JSON (opaque bytes: model.NewBytesEvent)", ErrInvalidEvent, e.Name)
	}
	if err := checkOrderingKey(e); err != nil {
		return err
	}
	if !isBytes {
		if err := checkPayloadText(e.Name, e.Payload); err != nil {
			return err
		}
	}
	if err := checkMetadata(e.Name, e.Metadata); err != nil {
		return err
	}
	return e.validateDelivery()
}

func checkName(field, s string, max int) error {
	if s != "" && len(s) <= max && printableASCII(s) {
		return nil
	}
	switch {
	case s == "":
		return fmt.Errorf("%w: %s must not be empty", ErrInvalidEvent, field)
	case len(s) > max:
		return fmt.Errorf("%w: %s %.40q... is %d bytes, over the limit of %d", ErrInvalidEvent, field, s, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidEvent, field, s)
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%w: %s %q must not contain spaces or control characters", ErrInvalidEvent, field, s)
	}
	return nil
}

// printableASCII reports whether s is printable ASCII without spaces: what almost every name is, and what
// checkName then needs no Unicode tables for.
func printableASCII(s string) bool {
	for i := range len(s) {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func marshalPayload(payload any) (json.RawMessage, error) {
	switch p := payload.(type) {
	case json.RawMessage:
		return validJSON(p)
	case []byte:
		return validJSON(p)
	}
	data, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	return data, nil
}

func validJSON(p []byte) (json.RawMessage, error) {
	p = bytes.TrimSpace(p)
	if !json.Valid(p) {
		return nil, errors.New("the raw payload is not valid JSON")
	}
	return json.RawMessage(p), nil
}
