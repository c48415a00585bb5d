package model

import (
	"bytes"
	"errors"
	"fmt"
	"maps"

	"github.com/bunbox/bunbox/internal/wire"
)

// ErrNotJSON is wrapped by the error of a reader that wants JSON and was given an event of NewBytesEvent
// (worker.HandleJSON): the bytes are not decoded as JSON.
var ErrNotJSON = errors.New("model: the payload is bytes (model.NewBytesEvent), not JSON")

// NewBytesEvent builds an event named name whose payload is data, opaque bytes that are not JSON: an image,
// a protobuf message, a file. The bytes travel unchanged: the Outbox writes them into the payload_encoded
// column (the jsonb payload column holds JSON null; with bunx.WithLocation's Codec, compressed and/or encrypted like
// any payload), the relay enqueues exactly these bytes as the task payload (or the encoded bytes when the
// consumer decodes), and the handler reads them as t.Payload() (after worker.DecodeTask or the Inbox's
// codec). The event's metadata carries bunbox-payload-format = bytes; worker.HandleJSON refuses
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
	md[wire.HeaderPayloadFormat] = wire.PayloadFormatBytes
	o.metadata = md
	return newEvent(name, bytes.Clone(data), &o)
}

// checkFormat checks the metadata key bunbox-payload-format: absent (JSON) or "bytes".
func checkFormat(e *Event) (isBytes bool, err error) {
	f, ok := e.Metadata[wire.HeaderPayloadFormat]
	switch {
	case !ok:
		return false, nil
	case f == wire.PayloadFormatBytes:
		return true, nil
	}
	return false, fmt.Errorf("%w %q: Metadata key %s is %q; the one format is %q, set by model.NewBytesEvent",
		ErrInvalidEvent, e.Name, wire.HeaderPayloadFormat, f, wire.PayloadFormatBytes)
}
