package bunx

import (
	"fmt"
	"maps"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// encode returns the events as the registry's codec writes them: each event whose payload the codec
// encodes is replaced by a copy with PayloadEncoded set, Payload JSON null and the encoding's metadata
// keys, and so is each event of bytes (model.NewBytesEvent), whose bytes go to PayloadEncoded as they are
// when the codec leaves them (or there is none); the others are kept. It returns events itself when it
// copies none of them. The copies are checked like the events: their metadata against model's limits, and
// the payload as written against the Outbox's payload limit.
func (r *registry) encode(events []*model.Event) ([]*model.Event, error) {
	var out []*model.Event // nil until the first copy
	for i, ev := range events {
		if ev.PayloadEncoded != nil {
			return nil, fmt.Errorf("%w %q: PayloadEncoded is set by the Outbox's codec (bunx.WithLocation's Codec), not by the caller",
				model.ErrInvalidEvent, ev.Name)
		}
		if _, ok := ev.Metadata[wire.HeaderPayloadEncoding]; ok {
			return nil, fmt.Errorf("%w %q: Metadata key %s is set by the Outbox's codec, not by the caller",
				model.ErrInvalidEvent, ev.Name, wire.HeaderPayloadEncoding)
		}
		isBytes := wire.IsBytes(ev.Metadata)
		data, encoding, keyID := []byte(ev.Payload), "", ""
		if r.codec.Encodes(len(ev.Payload)) {
			var err error
			if data, encoding, keyID, err = r.codec.Encode(ev.EventID, ev.Payload); err != nil {
				return nil, fmt.Errorf("%w %q: Payload: %w", model.ErrInvalidEvent, ev.Name, err)
			}
		}
		if len(data) > r.maxPayload {
			after := ""
			if encoding != "" {
				after = " after encoding (" + encoding + ")"
			}
			return nil, fmt.Errorf("%w %q: Payload is %d bytes%s, over the limit of %d (the payload limit: bunx.WithMaxPayloadSize)",
				model.ErrInvalidEvent, ev.Name, len(data), after, r.maxPayload)
		}
		if encoding == "" && !isBytes { // not encoded (compression did not make it smaller): plain JSON
			if out != nil {
				out = append(out, ev)
			}
			continue
		}
		if out == nil {
			out = append(make([]*model.Event, 0, len(events)), events[:i]...)
		}
		cp := *ev
		cp.Payload, cp.PayloadEncoded = nullPayload, data
		if encoding != "" {
			cp.Metadata = maps.Clone(ev.Metadata)
			if cp.Metadata == nil {
				cp.Metadata = make(map[string]string, 2)
			}
			cp.Metadata[wire.HeaderPayloadEncoding] = encoding
			if keyID != "" {
				cp.Metadata[wire.HeaderPayloadKeyID] = keyID
			} else {
				delete(cp.Metadata, wire.HeaderPayloadKeyID)
			}
			if err := cp.ValidateMetadata(); err != nil {
				return nil, fmt.Errorf("%w (with the payload codec's metadata keys %s and %s)", err,
					wire.HeaderPayloadEncoding, wire.HeaderPayloadKeyID)
			}
		}
		out = append(out, &cp)
	}
	if out == nil {
		return events, nil
	}
	return out, nil
}

// needsEncode reports whether an event of events carries bytes (model.NewBytesEvent), which encode writes
// into the payload_encoded column with a codec or without, or has PayloadEncoded set, which encode refuses.
func needsEncode(events []*model.Event) bool {
	for _, ev := range events {
		if ev.PayloadEncoded != nil || wire.IsBytes(ev.Metadata) {
			return true
		}
	}
	return false
}

// payloadLimit is the limit of the payload as the caller gives it: with a codec, the ceiling (encode checks
// the Outbox's limit on what is written, and the codec its own on the payload it encodes).
func (r *registry) payloadLimit() int {
	if r.codec != nil {
		return wire.MaxPayloadSizeCeiling
	}
	return r.maxPayload
}

// nullPayload is the payload column of an encoded row.
var nullPayload = []byte("null")

// copyReturned gives the caller's events (callers, when the codec made copies) the id and created_at that
// the prepared INSERT's RETURNING scanned into the copies written.
func copyReturned(callers, written []*model.Event, returning bool) {
	if !returning || callers == nil {
		return
	}
	for i, ev := range written {
		if ev != callers[i] {
			callers[i].ID, callers[i].CreatedAt = ev.ID, ev.CreatedAt
		}
	}
}
