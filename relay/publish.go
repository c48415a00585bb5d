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

// publisher publishes the events of one deliver goroutine, one at a time. It keeps what consecutive
// events share: the context that bounds their enqueues, the span name of their queue and what their
// tasks can reuse (taskBuilder).
type publisher struct {
	d      *deliverer
	round  context.Context // the round's ctx, which Observer.OnEnqueue gets (with the publish span)
	parent context.Context // round without its cancellation: a started enqueue finishes

	ctx     context.Context // the enqueues' context, with a deadline EnqueueTimeout after it was made
	cancel  context.CancelFunc
	renewAt time.Time // when ctx is replaced: EnqueueTimeout/enqueueCtxShare after it was made

	queue, spanName string // the last event's queue and "send <queue>"

	tasks taskBuilder
}

// enqueueCtxShare is how many enqueues' worth of time one enqueue context is shared over: a context with
// a deadline costs a timer and two allocations, which at tens of thousands of enqueues a second is a few
// percent of the relay's CPU. Sharing it for a hundredth of EnqueueTimeout gives each enqueue between
// 99/100 of EnqueueTimeout and all of it.
const enqueueCtxShare = 100

// enqueueCtx returns the context that bounds an enqueue that starts now: it ends EnqueueTimeout after it
// was made, no more than EnqueueTimeout/enqueueCtxShare ago.
func (p *publisher) enqueueCtx(now time.Time) context.Context {
	if p.ctx == nil || !now.Before(p.renewAt) {
		p.close()
		timeout := p.d.cfg.EnqueueTimeout
		p.ctx, p.cancel = context.WithDeadline(p.parent, now.Add(timeout))
		p.renewAt = now.Add(timeout / enqueueCtxShare)
	}
	return p.ctx
}

// close releases the enqueue context's timer.
func (p *publisher) close() {
	if p.cancel != nil {
		p.cancel()
	}
}

// publish enqueues ev (see deliverer.enqueue) in a publish span and reports it to Observer.OnEnqueue.
//
// The span follows the OpenTelemetry messaging conventions: kind producer, named "send <queue>", with
// messaging.system "asynq", messaging.destination.name the queue, messaging.message.id the event id and
// messaging.operation.type "send". It links to the span that recorded the event, read from the event's
// metadata with the application's propagator (otel.GetTextMapPropagator); its parent is whatever span the
// round's ctx holds (usually none: one relay round carries many producers' events, hence the link). The
// task keeps the producer's trace context, so the handler's span continues the producer's trace.
func (p *publisher) publish(ev *model.Event) error {
	d := p.d
	start := time.Now()
	ctx := p.enqueueCtx(start)
	opts := make([]trace.SpanStartOption, 0, 4)
	opts = append(opts, publishSpanKind, publishSpanAttributes)
	if len(ev.Metadata) > 0 {
		pctx := otel.GetTextMapPropagator().Extract(context.Background(), propagation.MapCarrier(ev.Metadata))
		if sc := trace.SpanContextFromContext(pctx); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	if ev.Queue != p.queue || p.spanName == "" {
		p.queue, p.spanName = ev.Queue, "send "+ev.Queue
	}
	id := ev.EventID.String()
	opts = append(opts, trace.WithAttributes(
		semconv.MessagingDestinationName(ev.Queue),
		semconv.MessagingMessageID(id),
		semconv.MessagingMessageBodySize(len(ev.Payload)),
		attribute.String("bunbox.event_name", ev.Name),
	))
	ctx, span := d.cfg.tracer.Start(ctx, p.spanName, opts...)
	err := d.enqueue(ctx, ev, id, &p.tasks)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if d.cfg.Observer.OnEnqueue != nil {
		d.cfg.Observer.OnEnqueue(trace.ContextWithSpan(p.round, span), EnqueueEvent{
			ID: ev.ID, EventID: id, EventName: ev.Name, Queue: ev.Queue,
			CreatedAt: ev.CreatedAt, Duration: time.Since(start), Err: err,
		})
	}
	return err
}
