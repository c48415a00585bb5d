package relay

import (
	"fmt"

	"github.com/bunbox/bunbox/model"
)

// readEncoded checks the encoded payload of a claimed row (one an Outbox's codec wrote, see
// bunx.WithCodec): the column payload_encoded and the metadata key model.HeaderPayloadEncoding go
// together, and the bytes are within model.MaxPayloadSizeCeiling. It does not decode them (see payload).
func readEncoded(ev *model.Event) error {
	encoding, named := ev.Metadata[model.HeaderPayloadEncoding]
	switch {
	case ev.PayloadEncoded == nil && !named:
		return nil
	case ev.PayloadEncoded == nil:
		return fmt.Errorf("%w: metadata names the payload encoding %q and column payload_encoded is NULL", errMalformedRow, encoding)
	case !named || encoding == "":
		return fmt.Errorf("%w: column payload_encoded is set and metadata names no %s", errMalformedRow, model.HeaderPayloadEncoding)
	case len(ev.PayloadEncoded) > model.MaxPayloadSizeCeiling:
		return fmt.Errorf("%w: column payload_encoded is %d bytes, over the limit of %d (model.MaxPayloadSizeCeiling)",
			errMalformedRow, len(ev.PayloadEncoded), model.MaxPayloadSizeCeiling)
	}
	return nil
}

// payload makes ev's payload the one its task carries: an encoded payload decoded with Config.Codec (its
// encoding's headers dropped), or without a Codec passed through encoded, its headers kept for the
// consumer. A payload that does not decode is an error wrapping errMalformedRow, which marks the row dead
// at once; it names the key id, never a key.
func (r *Relay) payload(ev *model.Event) error {
	if ev.PayloadEncoded == nil {
		return nil
	}
	if r.cfg.Codec == nil {
		ev.Payload, ev.PayloadEncoded = ev.PayloadEncoded, nil
		return nil
	}
	if err := r.cfg.Codec.DecodeEvent(ev); err != nil {
		return fmt.Errorf("%w: relay.Config.Codec: %w", errMalformedRow, err)
	}
	return nil
}
