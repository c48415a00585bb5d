package worker_test

import (
	"context"
	"os"
	"testing"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

func TestMain(m *testing.M) {
	// The application chooses the propagator; these tests choose W3C trace context and baggage, once for
	// the whole process (it is global), before any test runs.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	goleak.VerifyTestMain(outboxtest.Examples(m))
}

// exampleDB is the examples' database: DATABASE_URL, with bunbox's schema applied.
func exampleDB(ctx context.Context) *bun.DB {
	db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})
	if err != nil {
		panic(err)
	}
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		panic(err)
	}
	return db
}
