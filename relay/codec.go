package relay

import (
	"errors"
	"fmt"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// readEncoded checks the encoded payload of a claimed row (one an Outbox's codec wrote, see
// bunx.WithLocation with a Codec): the column payload_encoded and the metadata key bunbox-payload-encoding go
// together, or payload_encoded holds the bytes of a bytes event (model.NewBytesEvent) as they are; and the
// bytes are within the 64 MiB ceiling. It does not decode them (see payload).
func readEncoded(ev *model.Event) error {
	encoding, named := ev.Metadata[wire.HeaderPayloadEncoding]
	isBytes := wire.IsBytes(ev.Metadata)
	switch {
	case ev.PayloadEncoded == nil && !named && !isBytes:
		return nil
	case ev.PayloadEncoded == nil && !named:
		return fmt.Errorf("%w: metadata marks a payload of bytes (%s) and column payload_encoded is NULL", errMalformedRow, wire.HeaderPayloadFormat)
	case ev.PayloadEncoded == nil:
		return fmt.Errorf("%w: metadata names the payload encoding %q and column payload_encoded is NULL", errMalformedRow, encoding)
	case isBytes && !named && len(ev.PayloadEncoded) == 0:
		return fmt.Errorf("%w: column payload_encoded of a payload of bytes is empty", errMalformedRow)
	case (!named && !isBytes) || (named && encoding == ""):
		return fmt.Errorf("%w: column payload_encoded is set and metadata names no %s", errMalformedRow, wire.HeaderPayloadEncoding)
	case len(ev.PayloadEncoded) > wire.MaxPayloadSizeCeiling:
		return fmt.Errorf("%w: column payload_encoded is %d bytes, over the limit of %d (wire.MaxPayloadSizeCeiling)",
			errMalformedRow, len(ev.PayloadEncoded), wire.MaxPayloadSizeCeiling)
	}
	return nil
}

// payload makes ev's payload the one its task carries: an encoded payload decoded with Config.Location.Codec (its
// encoding's headers dropped), or without a Codec passed through encoded, its headers kept for the
// consumer; the bytes of a bytes event that no codec encoded, as they are. It names the key id, never a key.
//
// A key id the Codec's Keyring does not hold (model.ErrUnknownKeyID) wraps ErrTaskRejected: the row is
// charged an attempt and tried again after the backoff, dead after Config.MaxAttempts, as the worker's
// task is retried by asynq (worker.DecodeTask). The key is new and not yet deployed to every relay, and
// the fix is that deploy; the other rows go on meanwhile. A payload that does not decode under a key the
// Keyring holds (model.ErrCorruptPayload) wraps errMalformedRow, which marks the row dead at once.
func (d *deliverer) payload(ev *model.Event) error {
	if ev.PayloadEncoded == nil {
		return nil
	}
	if d.cfg.Location.Codec == nil {
		ev.Payload, ev.PayloadEncoded = ev.PayloadEncoded, nil
		return nil
	}
	if err := d.cfg.Location.Codec.DecodeEvent(ev); err != nil {
		if errors.Is(err, model.ErrUnknownKeyID) {
			return fmt.Errorf("%w: relay.Config.Location.Codec: %w", ErrTaskRejected, err)
		}
		return fmt.Errorf("%w: relay.Config.Location.Codec: %w", errMalformedRow, err)
	}
	return nil
}
