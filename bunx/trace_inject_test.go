package bunx_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// TestRecordInjectsWithTheGlobalPropagator shows that Record uses the application's propagator (here W3C
// trace context and baggage, set in TestMain), not a fixed one: the baggage travels too.
func TestRecordInjectsWithTheGlobalPropagator(t *testing.T) {
	t.Parallel()
	b := setup(t)
	member, err := baggage.NewMember("tenant", "acme")
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(baggage.ContextWithBaggage(context.Background(), bag), "produce")
	defer span.End()
	ev, err := model.NewEvent("traced", nil)
	require.NoError(t, err)
	require.NoError(t, b.ob.Record(ctx, b.db, ev))
	md := b.events(t)[0].Metadata
	require.Equal(t, "tenant=acme", md["baggage"])
	require.Contains(t, md[wire.HeaderTraceParent], span.SpanContext().TraceID().String())
}
