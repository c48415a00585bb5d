package model

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bunbox/bunbox/internal/wire"
)

// checkMetadata checks md against the metadata limits. Keys and values must be valid UTF-8 without NUL:
// PostgreSQL's jsonb refuses NUL, and the task headers are protobuf strings, which must be UTF-8.
func checkMetadata(event string, md map[string]string) error {
	if len(md) > wire.MaxMetadataCount {
		return fmt.Errorf("%w %q: Metadata has %d keys, over the limit of %d (MaxMetadataCount)",
			ErrInvalidEvent, event, len(md), wire.MaxMetadataCount)
	}
	total := 0
	for k, v := range md {
		switch {
		case k == "":
			return fmt.Errorf("%w %q: Metadata keys must not be empty", ErrInvalidEvent, event)
		case len(k) > wire.MaxMetadataKeyLength:
			return fmt.Errorf("%w %q: Metadata key %.40q... is %d bytes, over the limit of %d (MaxMetadataKeyLength)",
				ErrInvalidEvent, event, k, len(k), wire.MaxMetadataKeyLength)
		case len(v) > wire.MaxMetadataValueLength:
			return fmt.Errorf("%w %q: Metadata value of %.40q is %d bytes, over the limit of %d (MaxMetadataValueLength)",
				ErrInvalidEvent, event, k, len(v), wire.MaxMetadataValueLength)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return fmt.Errorf("%w %q: Metadata %.40q: keys and values must be valid UTF-8", ErrInvalidEvent, event, k)
		case strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0:
			return fmt.Errorf("%w %q: Metadata %.40q: keys and values must not contain NUL", ErrInvalidEvent, event, k)
		}
		total += len(k) + len(v)
	}
	if total > wire.MaxMetadataSize {
		return fmt.Errorf("%w %q: Metadata is %d bytes, over the limit of %d (MaxMetadataSize)",
			ErrInvalidEvent, event, total, wire.MaxMetadataSize)
	}
	return nil
}

// checkPayloadText refuses a payload that PostgreSQL's jsonb would refuse although it is valid JSON:
// invalid UTF-8, the escape \u0000, or a \u escape of half a surrogate pair. p is valid JSON, so a
// backslash starts an escape and \u is followed by four hex digits.
func checkPayloadText(event string, p []byte) error {
	if !utf8.Valid(p) {
		return fmt.Errorf("%w %q: Payload is not valid UTF-8", ErrInvalidEvent, event)
	}
	highBefore := false // the previous escape was a high surrogate, which this one must complete
	for i := 0; i+1 < len(p); i++ {
		if p[i] != '\\' {
			if highBefore {
				return errLoneSurrogate(event)
			}
			continue
		}
		if p[i+1] != 'u' || i+6 > len(p) {
			if highBefore {
				return errLoneSurrogate(event)
			}
			i++ // skip the escaped character
			continue
		}
		r, err := strconv.ParseUint(string(p[i+2:i+6]), 16, 16)
		if err != nil {
			return fmt.Errorf("%w %q: Payload has a bad \\u escape", ErrInvalidEvent, event)
		}
		switch {
		case r == 0:
			return fmt.Errorf(`%w %q: Payload contains \u0000, which PostgreSQL's jsonb refuses`, ErrInvalidEvent, event)
		case r >= 0xD800 && r <= 0xDBFF:
			if highBefore {
				return errLoneSurrogate(event)
			}
			highBefore = true
		case r >= 0xDC00 && r <= 0xDFFF:
			if !highBefore {
				return errLoneSurrogate(event)
			}
			highBefore = false
		default:
			if highBefore {
				return errLoneSurrogate(event)
			}
		}
		i += 5
	}
	if highBefore {
		return errLoneSurrogate(event)
	}
	return nil
}

func errLoneSurrogate(event string) error {
	return fmt.Errorf("%w %q: Payload has a \\u escape of half a surrogate pair, which PostgreSQL's jsonb refuses", ErrInvalidEvent, event)
}

// ValidateMetadata checks the event's Metadata against the limits of WithMetadata alone, with the error
// Validate would return for it. bunx checks with it what the trace context adds to an event that Validate
// has already accepted.
func (e *Event) ValidateMetadata() error {
	if e == nil {
		return fmt.Errorf("%w: the event is nil", ErrInvalidEvent)
	}
	return checkMetadata(e.Name, e.Metadata)
}
