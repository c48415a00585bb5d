package model

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
)

// HeaderPayloadFormat is the metadata key (and so the task header) that marks a payload that is not JSON:
// PayloadFormatBytes for an event of NewBytesEvent. Absent for a JSON payload. It is set by
// NewBytesEvent and kept when a codec decodes the payload, so the handler knows what it holds.
const HeaderPayloadFormat = "bunbox-payload-format"

// PayloadFormatBytes is HeaderPayloadFormat's value for opaque bytes (NewBytesEvent).
const PayloadFormatBytes = "bytes"

// ErrNotJSON is wrapped by the error of a reader that wants JSON and was given an event of NewBytesEvent
// (worker.HandleJSON): the bytes are not decoded as JSON.
var ErrNotJSON = errors.New("model: the payload is bytes (model.NewBytesEvent), not JSON")

// NewBytesEvent builds an event named name whose payload is data, opaque bytes that are not JSON: an image,
// a protobuf message, a file. The bytes travel unchanged: the Outbox writes them into the payload_encoded
// column (the jsonb payload column holds JSON null; with bunx.WithCodec, compressed and/or encrypted like
// any payload), the relay enqueues exactly these bytes as the task payload (or the encoded bytes when the
// consumer decodes), and the handler reads them as t.Payload() (after worker.DecodeTask or the Inbox's
// codec). The event's metadata carries HeaderPayloadFormat = PayloadFormatBytes; worker.HandleJSON refuses
// such a task with ErrNotJSON instead of decoding the bytes as JSON.
//
// data must not be empty, and is copied. The options and the checks are NewEvent's, and the payload limit
// (bunx.WithMaxPayloadSize) counts the bytes. NewEvent is unchanged: it takes a []byte as JSON text.
func NewBytesEvent(name string, data []byte, opts ...Option) (*Event, error) {
	o := options{queue: DefaultQueue}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%w %q: Payload must not be empty (a bytes event carries at least one byte)", ErrInvalidEvent, name)
	}
	md := maps.Clone(o.metadata)
	if md == nil {
		md = make(map[string]string, 1)
	}
	md[HeaderPayloadFormat] = PayloadFormatBytes
	o.metadata = md
	return newEvent(name, bytes.Clone(data), &o)
}

// IsBytes reports whether metadata marks the payload as opaque bytes (NewBytesEvent): HeaderPayloadFormat
// is PayloadFormatBytes. Give it an event's Metadata, or an asynq task's Headers().
func IsBytes(metadata map[string]string) bool {
	return metadata[HeaderPayloadFormat] == PayloadFormatBytes
}

// checkFormat checks the metadata key HeaderPayloadFormat: absent (JSON) or PayloadFormatBytes.
func checkFormat(e *Event) (isBytes bool, err error) {
	f, ok := e.Metadata[HeaderPayloadFormat]
	switch {
	case !ok:
		return false, nil
	case f == PayloadFormatBytes:
		return true, nil
	}
	return false, fmt.Errorf("%w %q: Metadata key %s is %q; the one format is %q, set by model.NewBytesEvent",
		ErrInvalidEvent, e.Name, HeaderPayloadFormat, f, PayloadFormatBytes)
}
