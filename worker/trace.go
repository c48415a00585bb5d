package worker

import (
	"context"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunbox/bunbox/internal/wire"
)

// tracerName is the instrumentation scope of bunbox's consumer spans.
const tracerName = "github.com/bunbox/bunbox/worker"

// messagingSystem is the messaging.system attribute of bunbox's spans: the broker is asynq.
const messagingSystem = "asynq"

// tracing starts the consumer span of a task.
type tracing struct {
	tracer trace.Tracer
}

// newTracing returns the tracing of tp, or of the global TracerProvider when tp is nil.
func newTracing(tp trace.TracerProvider) *tracing {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &tracing{tracer: tp.Tracer(tracerName)}
}

// consumerSpanKey marks a context whose consumer span bunbox already started, so that an Inbox handler
// behind TraceMiddleware does not start a second one.
type consumerSpanKey struct{}

// TraceMiddleware returns an asynq middleware that continues the producer's trace in the handler: it reads
// the trace context the producer's Record put in the event's metadata (which the relay carries in the task
// headers) with the application's propagator (otel.GetTextMapPropagator) and runs the handler in a
// consumer span that is the producer's span's child. The span follows the OpenTelemetry messaging
// conventions: named "process <queue>", with messaging.system "asynq", messaging.destination.name the
// queue, messaging.message.id the event id and messaging.operation.type "process", plus bunbox.event_name
// and, for a fanned-out task, bunbox.listener; a handler's error is recorded on it.
//
// tp is the TracerProvider of the spans; nil means the global one (otel.GetTracerProvider), read when the
// middleware is made. Use it for plain asynq handlers (mux.Use(worker.TraceMiddleware(nil))); handlers
// wrapped by an Inbox start the same span themselves (WithTracerProvider), and behind this middleware they
// reuse its span.
func TraceMiddleware(tp trace.TracerProvider) asynq.MiddlewareFunc {
	t := newTracing(tp)
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			return t.run(ctx, task, "", func(ctx context.Context) error { return next.ProcessTask(ctx, task) })
		})
	}
}

// run runs fn in the consumer span of task, unless ctx already is in one that bunbox started.
func (t *tracing) run(ctx context.Context, task *asynq.Task, handler string, fn func(context.Context) error) error {
	if ctx.Value(consumerSpanKey{}) != nil {
		return fn(ctx)
	}
	ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(task.Headers()))
	queue, _ := asynq.GetQueueName(ctx)
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(messagingSystem),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(queue),
		attribute.String("bunbox.event_name", eventName(task)),
	}
	if id := task.Headers()[wire.HeaderEventID]; id != "" {
		attrs = append(attrs, semconv.MessagingMessageID(id))
	}
	if l := task.Headers()[wire.HeaderListener]; l != "" {
		attrs = append(attrs, attribute.String("bunbox.listener", l))
	}
	if handler != "" {
		attrs = append(attrs, attribute.String("bunbox.handler", handler))
	}
	name := "process"
	if queue != "" {
		name += " " + queue
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	defer span.End()
	err := fn(context.WithValue(ctx, consumerSpanKey{}, true))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// eventName is the event's name: its header, or the task type for a task without one.
func eventName(task *asynq.Task) string {
	if n := task.Headers()[wire.HeaderEventName]; n != "" {
		return n
	}
	return task.Type()
}
