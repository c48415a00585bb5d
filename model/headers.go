package model

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
