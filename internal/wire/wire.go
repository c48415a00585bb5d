// Package wire holds what travels between the writer, the relay and the worker besides the payload: the
// names of the task headers bunbox sets, the encodings of a payload, and the limits every side checks. Only
// bunbox's own packages read it; the documentation says what a handler finds in the headers.
package wire

import (
	"fmt"
	"strings"
)

// Task headers the relay sets on every asynq task, next to the event's own Metadata. Handlers read them
// with (*asynq.Task).Headers(); the worker Inbox uses HeaderEventID as the deduplication key.
const (
	// HeaderEventID carries the event's EventID (also the task's TaskID).
	HeaderEventID = "bunbox-event-id"
	// HeaderEventName carries the event name (also the task type).
	HeaderEventName = "bunbox-event-name"
	// HeaderCreatedAt carries when the event was written, in RFC 3339 with nanoseconds.
	HeaderCreatedAt = "bunbox-created-at"
	// HeaderTraceParent carries the W3C trace context of the transaction that wrote the event, when it
	// ran inside a span and the application's propagator (otel.GetTextMapPropagator) is W3C's: the keys
	// are the propagator's, copied from the metadata. worker.TraceMiddleware and the worker Inbox read them so
	// that the handler's span continues the producer's trace.
	HeaderTraceParent = "traceparent"
	// HeaderTraceState carries the W3C tracestate that goes with HeaderTraceParent.
	HeaderTraceState = "tracestate"
)

// HeaderListener carries the listener a fanned-out task is for (see fanout.Routes); absent otherwise.
const HeaderListener = "bunbox-listener"

// HeaderOrderingKey carries the event's ordering key (see WithOrderingKey); absent for an event without one.
const HeaderOrderingKey = "bunbox-ordering-key"

// HeaderPayloadFormat is the metadata key (and so the task header) that marks a payload that is not JSON:
// PayloadFormatBytes for an event of NewBytesEvent. Absent for a JSON payload. It is set by
// NewBytesEvent and kept when a codec decodes the payload, so the handler knows what it holds.
const HeaderPayloadFormat = "bunbox-payload-format"

// PayloadFormatBytes is HeaderPayloadFormat's value for opaque bytes (NewBytesEvent).
const PayloadFormatBytes = "bytes"

// IsBytes reports whether metadata marks the payload as opaque bytes (NewBytesEvent): HeaderPayloadFormat
// is PayloadFormatBytes. Give it an event's Metadata, or an asynq task's Headers().
func IsBytes(metadata map[string]string) bool {
	return metadata[HeaderPayloadFormat] == PayloadFormatBytes
}

// Metadata keys (and so task headers) of an encoded payload (see Codec). Both are set by the Outbox that
// encoded it and read by whoever decodes it: the relay (relay.Config.Codec) or the consumer
// (worker.WithLocation, worker.DecodeTask).
const (
	// HeaderPayloadEncoding names how the payload was encoded, the steps in the order they were applied,
	// joined by "+": "gzip", "aes-gcm" or "gzip+aes-gcm". Absent for a plain JSON payload.
	HeaderPayloadEncoding = "bunbox-payload-encoding"
	// HeaderPayloadKeyID names the key of the Keyring that encrypted the payload; absent when it is not
	// encrypted. It is an id, never the key.
	HeaderPayloadKeyID = "bunbox-payload-key-id"
)

// The steps of an encoding (HeaderPayloadEncoding).
const (
	EncodingGzip   = "gzip"
	EncodingAESGCM = "aes-gcm"
)

// WithoutEncodingHeaders returns a copy of md without HeaderPayloadEncoding and HeaderPayloadKeyID (nil
// when nothing else is left).
func WithoutEncodingHeaders(md map[string]string) map[string]string {
	out := make(map[string]string, len(md))
	for k, v := range md {
		if k != HeaderPayloadEncoding && k != HeaderPayloadKeyID {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// DescribeEncoded describes an encoded payload, or one of bytes (NewBytesEvent), for people, without its
// bytes: "encrypted (key id k1), gzip-compressed, 310 bytes", "bytes (not JSON), 1024 bytes", "bytes (not
// JSON), encrypted (key id k1), 1052 bytes"; the size is the stored one. It returns "" for a JSON payload
// that is not encoded.
func DescribeEncoded(metadata map[string]string, encoded, payload []byte) string {
	enc := metadata[HeaderPayloadEncoding]
	if IsBytes(metadata) && enc == "" {
		n := len(encoded)
		if encoded == nil {
			n = len(payload) // an event as NewBytesEvent made it, not yet written
		}
		return fmt.Sprintf("bytes (not JSON), %d bytes", n)
	}
	if encoded == nil && enc == "" {
		return ""
	}
	var parts []string
	if IsBytes(metadata) {
		parts = append(parts, "bytes (not JSON)")
	}
	if strings.HasSuffix(enc, EncodingAESGCM) {
		parts = append(parts, fmt.Sprintf("encrypted (key id %s)", metadata[HeaderPayloadKeyID]))
	}
	if strings.HasPrefix(enc, EncodingGzip) {
		parts = append(parts, "gzip-compressed")
	}
	if len(parts) == 0 || (len(parts) == 1 && IsBytes(metadata)) {
		parts = append(parts, fmt.Sprintf("encoded as %q", enc))
	}
	return fmt.Sprintf("%s, %d bytes", strings.Join(parts, ", "), len(encoded))
}

// Limits on Metadata, which travels in the asynq task headers: Validate refuses an event over any of them
// with an error wrapping ErrInvalidEvent that names the limit, and the relay marks a row over them (one
// written around bunx) dead at once.
const (
	// MaxMetadataKeyLength is the longest metadata key, in bytes.
	MaxMetadataKeyLength = 128
	// MaxMetadataValueLength is the longest metadata value, in bytes (a W3C tracestate is at most 512).
	MaxMetadataValueLength = 4096
	// MaxMetadataCount is the most metadata keys one event carries.
	MaxMetadataCount = 32
	// MaxMetadataSize is the most bytes of metadata keys and values together, for one event.
	MaxMetadataSize = 16 << 10
)

// MaxPayloadSizeCeiling is the largest payload any setting allows, in bytes of JSON: a larger
// bunx.WithMaxPayloadSize counts as this, and the relay marks a row with a larger payload dead at once.
const MaxPayloadSizeCeiling = 64 << 20

// Limits on names, checked where events are written.
const (
	// MaxQueueLength is the longest queue name, in bytes.
	MaxQueueLength = 255
	// DefaultMaxPayloadSize is the largest payload, in bytes of JSON, that an Outbox writes unless
	// bunx.WithMaxPayloadSize sets another limit: the one payload limit, checked where events are written.
	DefaultMaxPayloadSize = 1 << 20
)
