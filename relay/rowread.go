package relay

import (
	"encoding/json"
	"fmt"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// maxMetadataColumn is the most bytes the metadata column of a deliverable row can take as JSON text: the
// keys and values within 16 KiB, each byte escaped (\u00XX, 6 bytes) at worst, plus the
// quotes, colons and commas of 32 pairs and the braces. A longer column is refused
// before it is decoded.
const maxMetadataColumn = 6*wire.MaxMetadataSize + 6*wire.MaxMetadataCount + 2

// readRow completes ev, whose other columns are scanned, from its metadata column, and checks that ev can
// become a task: what model.Event.Validate checks, with the payload limit at the 64 MiB ceiling
// (the writer enforced its own, lower limit; a row written around bunx may not have). The payload is not
// parsed again: the jsonb column holds valid JSON. An error wraps errMalformedRow and names what is wrong;
// the round marks the row dead at once. metadata is not kept: it may be the driver's buffer.
func readRow(ev *model.Event, metadata []byte) error {
	if len(metadata) > maxMetadataColumn {
		return fmt.Errorf("%w: column metadata is %d bytes, over what wire.MaxMetadataSize (%d) allows",
			errMalformedRow, len(metadata), wire.MaxMetadataSize)
	}
	if len(metadata) > 2 || string(metadata) != "{}" { // "{}" is the column's default: no map to make
		ev.Metadata = nil
		if err := json.Unmarshal(metadata, &ev.Metadata); err != nil {
			return fmt.Errorf("%w: column metadata must be a JSON object of strings: %v", errMalformedRow, err)
		}
	}
	if err := readEncoded(ev); err != nil {
		return err
	}
	switch {
	case len(ev.Payload) == 0:
		return fmt.Errorf("%w: column payload is empty", errMalformedRow)
	case len(ev.Payload) > wire.MaxPayloadSizeCeiling:
		return fmt.Errorf("%w: column payload is %d bytes, over the limit of %d (wire.MaxPayloadSizeCeiling)",
			errMalformedRow, len(ev.Payload), wire.MaxPayloadSizeCeiling)
	}
	// The payload was checked above, short of parsing it: Validate sees a stand-in, in ev itself rather than
	// in a copy, which would be an allocation per row.
	payload := ev.Payload
	ev.Payload = checkedPayload
	err := ev.Validate(wire.MaxPayloadSizeCeiling)
	ev.Payload = payload
	if err != nil {
		return fmt.Errorf("%w: %w", errMalformedRow, err)
	}
	return nil
}

// checkedPayload stands in for a payload readRow has checked. Validate only reads it.
var checkedPayload = json.RawMessage("null")
