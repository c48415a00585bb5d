package bunx_test

import (
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestMain(m *testing.M) {
	// The application chooses the propagator; these tests choose W3C trace context and baggage, once for
	// the whole process (it is global), before any test runs.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	goleak.VerifyTestMain(outboxtest.Examples(m))
}
