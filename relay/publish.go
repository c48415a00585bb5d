package relay

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunbox/bunbox/model"
)

// tracerName is the instrumentation scope of the relay's spans.
const tracerName = "github.com/bunbox/bunbox/relay"

// publishSpanKind and publishSpanAttributes are the options every publish span starts with, made once
// rather than per event: the span's attributes are these, then the event's own (see publish).
var (
	publishSpanKind       = trace.WithSpanKind(trace.SpanKindProducer)
	publishSpanAttributes = trace.WithAttributes(
		semconv.MessagingSystemKey.String("asynq"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
	)
)

// publish enqueues ev (see enqueue) in a publish span and reports it to Observer.OnEnqueue.
//
// The span follows the OpenTelemetry messaging conventions: kind producer, named "send <queue>", with
// messaging.system "asynq", messaging.destination.name the queue, messaging.message.id the event id and
// messaging.operation.type "send". It links to the span that recorded the event, read from the event's
// metadata with the application's propagator (otel.GetTextMapPropagator); its parent is whatever span ctx
// holds (usually none: one relay round carries many producers' events, hence the link). The task keeps
// the producer's trace context, so the handler's span continues the producer's trace.
func (r *Relay) publish(ctx context.Context, ev *model.Event) error {
	start := time.Now()
	var link []trace.Link
	if len(ev.Metadata) > 0 {
		pctx := otel.GetTextMapPropagator().Extract(context.Background(), propagation.MapCarrier(ev.Metadata))
		if sc := trace.SpanContextFromContext(pctx); sc.IsValid() {
			link = []trace.Link{{SpanContext: sc}}
		}
	}
	ctx, span := r.cfg.tracer.Start(ctx, "send "+ev.Queue,
		publishSpanKind,
		trace.WithLinks(link...),
		publishSpanAttributes,
		trace.WithAttributes(
			semconv.MessagingDestinationName(ev.Queue),
			semconv.MessagingMessageID(ev.EventID.String()),
			semconv.MessagingMessageBodySize(len(ev.Payload)),
			attribute.String("bunbox.event_name", ev.Name),
		))
	err := r.enqueue(ctx, ev)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if r.cfg.Observer.OnEnqueue != nil {
		r.cfg.Observer.OnEnqueue(ctx, EnqueueEvent{
			ID: ev.ID, EventID: ev.EventID.String(), EventName: ev.Name, Queue: ev.Queue,
			CreatedAt: ev.CreatedAt, Duration: time.Since(start), Err: err,
		})
	}
	return err
}
