package bunx

import (
	"context"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// The trace context fields kept longest when an event's metadata has no room for all the propagator gives:
// the W3C traceparent (the trace itself), then its tracestate. Baggage and any other field go first.
var keptTraceFields = []string{wire.HeaderTraceParent, wire.HeaderTraceState}

// injectTrace adds the trace context of ctx to each event's metadata with the application's propagator
// (otel.GetTextMapPropagator, a no-op until the application sets one). An event whose metadata already has
// one of the propagator's fields keeps its own.
//
// It runs after the events were validated, and what it adds never makes a write fail nor an event the
// relay refuses: an event whose metadata would go over model's limits with the trace context (7 kB of
// baggage, 32 metadata keys of the application's own) gets less of it, the baggage dropped first, then
// tracestate, then the traceparent too, each drop logged at Warn with the event and the limit. The
// business transaction commits, and the event is delivered, with the trace context that fitted.
func (r *registry) injectTrace(ctx context.Context, events []*model.Event) {
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return // nothing for a propagator to carry
	}
	prop := otel.GetTextMapPropagator()
	carrier := propagation.MapCarrier{}
	prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return
	}
	fields := prop.Fields()
next:
	for _, ev := range events {
		for _, f := range fields {
			if _, ok := ev.Metadata[f]; ok {
				continue next
			}
		}
		if ev.Metadata == nil {
			ev.Metadata = make(map[string]string, len(carrier))
		}
		for k, v := range carrier {
			ev.Metadata[k] = v
		}
		if err := ev.ValidateMetadata(); err != nil {
			r.fitTrace(ctx, ev, carrier, err)
		}
	}
}

// fitTrace removes from ev's metadata the fields of carrier that injectTrace added, least useful first,
// until the metadata is within the limits again (it was before: validate accepted it), and logs what it
// removed and why. err is why the metadata with all of them is refused.
func (r *registry) fitTrace(ctx context.Context, ev *model.Event, carrier propagation.MapCarrier, err error) {
	var dropped []string
	drop := func(keep func(k string) bool) error {
		for k := range carrier {
			if _, ok := ev.Metadata[k]; ok && !keep(k) {
				delete(ev.Metadata, k)
				dropped = append(dropped, k)
			}
		}
		return ev.ValidateMetadata()
	}
	for n := len(keptTraceFields); n >= 0; n-- {
		kept := keptTraceFields[:n]
		if drop(func(k string) bool { return slices.Contains(kept, k) }) == nil {
			break
		}
	}
	slices.Sort(dropped)
	r.logger.LogAttrs(ctx, slog.LevelWarn, "bunx: trace context left out of an event's metadata, which would go over the limits with it",
		slog.String("event_name", ev.Name), slog.String("event_id", ev.EventID.String()),
		slog.Any("dropped", dropped), slog.String("limit", err.Error()))
}
