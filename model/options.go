package model

import "github.com/google/uuid"

// Option configures an Event built by NewEvent.
type Option func(*options)

type options struct {
	queue      string
	eventID    uuid.UUID
	eventIDSet bool
	metadata   map[string]string
	delivery   delivery // delivery.go

	orderingKey    string // WithOrderingKey, in ordering.go
	orderingKeySet bool
}

// WithQueue sends the event to the named asynq queue instead of DefaultQueue.
func WithQueue(queue string) Option {
	return func(o *options) { o.queue = queue }
}

// WithEventID sets the event's idempotency key, for example a key derived from the business operation,
// so that retrying the operation cannot produce a second event. The id must not be uuid.Nil.
func WithEventID(id uuid.UUID) Option {
	return func(o *options) { o.eventID, o.eventIDSet = id, true }
}

// WithMetadata adds one key/value pair to the metadata that travels in the task headers. An event carries
// at most 32 keys, each at most 128 bytes, each value at most 4096 bytes (a W3C tracestate is at most 512),
// and at most 16 KiB of keys and values together; keys and values are valid UTF-8 without NUL. The task
// headers also carry bunbox's own keys, which start with "bunbox-" (the event id, name, creation time,
// ordering key, payload format and encoding): leave those names to bunbox.
func WithMetadata(key, value string) Option {
	return func(o *options) {
		if o.metadata == nil {
			o.metadata = make(map[string]string)
		}
		o.metadata[key] = value
	}
}
