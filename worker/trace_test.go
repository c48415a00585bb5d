package worker_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/worker"
)

// TestTraceFromProducerToHandler follows two events through a real relay, Redis and asynq server: one
// handled through an Inbox, one by a plain handler behind TraceMiddleware. Each handler's span must be the
// child of the producer's span (one trace), and the relay's publish span must link to the producer's span.
func TestTraceFromProducerToHandler(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) })
	queue := randomQueue(t)
	redisOpt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	t.Cleanup(func() { deleteQueue(redisOpt, queue) }) // runs last, after the server stopped

	// The producer: a span around the business transaction that records both events.
	ob := bunx.New(db)
	ctxP, producer := tp.Tracer("shop").Start(ctx, "place order", trace.WithSpanKind(trace.SpanKindProducer))
	inboxEv, err := model.NewEvent("traced.inbox", map[string]int{"n": 1}, model.WithQueue(queue))
	require.NoError(t, err)
	plainEv, err := model.NewEvent("traced.plain", map[string]int{"n": 2}, model.WithQueue(queue))
	require.NoError(t, err)
	require.NoError(t, db.RunInTx(ctxP, nil, func(ctx context.Context, tx bun.Tx) error {
		return ob.Record(ctx, tx, inboxEv, plainEv)
	}))
	producer.End()
	psc := producer.SpanContext()

	// The worker: the handlers note the span they run in.
	handled := make(chan trace.SpanContext, 2)
	in := worker.NewInbox(db, worker.WithTracerProvider(tp), worker.WithInboxLogger(outboxtest.Logger(t)))
	mux := asynq.NewServeMux()
	mux.Handle("traced.inbox", in.Handler("notify", func(ctx context.Context, _ bun.Tx, _ *asynq.Task) error {
		handled <- trace.SpanContextFromContext(ctx)
		return nil
	}))
	mux.Handle("traced.plain", worker.TraceMiddleware(tp)(asynq.HandlerFunc(
		func(ctx context.Context, _ *asynq.Task) error {
			handled <- trace.SpanContextFromContext(ctx)
			return nil
		})))
	srv := asynq.NewServer(redisOpt, worker.ServerConfig(asynq.Config{Queues: map[string]int{queue: 1}, LogLevel: asynq.ErrorLevel}))
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	// The relay between them.
	r, err := relay.New(db, redisOpt, relay.Config{TracerProvider: tp, Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(runCtx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-stopped) })

	for range 2 {
		select {
		case sc := <-handled:
			require.Equal(t, psc.TraceID(), sc.TraceID(), "the handler runs in the producer's trace")
		case <-time.After(30 * time.Second):
			t.Fatal("the handlers did not run within 30s")
		}
	}
	// The relay ends its publish spans after the enqueue returns, and a handler can run before that: wait
	// for both kinds (the producer kind holds "place order" and the two sends).
	outboxtest.WaitFor(t, 10*time.Second, "the consumer and publish spans ended", func() bool {
		spans := exp.GetSpans()
		return len(spansOfKind(spans, trace.SpanKindConsumer)) == 2 && len(spansOfKind(spans, trace.SpanKindProducer)) == 3
	})

	spans := exp.GetSpans()
	eventIDs := map[string]string{inboxEv.EventID.String(): "traced.inbox", plainEv.EventID.String(): "traced.plain"}
	for _, s := range spansOfKind(spans, trace.SpanKindConsumer) {
		require.Equal(t, "process "+queue, s.Name)
		require.Equal(t, psc.TraceID(), s.SpanContext.TraceID())
		require.Equal(t, psc.SpanID(), s.Parent.SpanID(), "the consumer span is the producer span's child")
		attrs := attrMap(s.Attributes)
		require.Equal(t, "asynq", attrs["messaging.system"])
		require.Equal(t, "process", attrs["messaging.operation.type"])
		require.Equal(t, queue, attrs["messaging.destination.name"])
		require.Contains(t, eventIDs, attrs["messaging.message.id"])
		require.Equal(t, eventIDs[attrs["messaging.message.id"]], attrs["bunbox.event_name"])
		if attrs["bunbox.event_name"] == "traced.inbox" {
			require.Equal(t, "notify", attrs["bunbox.handler"], "the Inbox names its handler")
		}
	}
	var sends int
	for _, s := range spansOfKind(spans, trace.SpanKindProducer) {
		if s.Name == "place order" {
			continue
		}
		sends++
		require.Equal(t, "send "+queue, s.Name)
		attrs := attrMap(s.Attributes)
		require.Equal(t, "asynq", attrs["messaging.system"])
		require.Equal(t, "send", attrs["messaging.operation.type"])
		require.Equal(t, queue, attrs["messaging.destination.name"])
		require.Contains(t, eventIDs, attrs["messaging.message.id"])
		require.Len(t, s.Links, 1, "the publish span links to the producer's span")
		require.Equal(t, psc.SpanID(), s.Links[0].SpanContext.SpanID())
		require.Equal(t, psc.TraceID(), s.Links[0].SpanContext.TraceID())
	}
	require.Equal(t, 2, sends, "one publish span per event")
}

func TestServerConfig(t *testing.T) {
	t.Parallel()
	cfg := worker.ServerConfig(asynq.Config{})
	require.Equal(t, worker.TaskCheckIntervalDefault, cfg.TaskCheckInterval)
	require.Equal(t, worker.DelayedTaskCheckIntervalDefault, cfg.DelayedTaskCheckInterval)
	cfg = worker.ServerConfig(asynq.Config{TaskCheckInterval: time.Second, DelayedTaskCheckInterval: 2 * time.Second, Concurrency: 3})
	require.Equal(t, time.Second, cfg.TaskCheckInterval, "a value given is kept")
	require.Equal(t, 2*time.Second, cfg.DelayedTaskCheckInterval, "a value given is kept")
	require.Equal(t, 3, cfg.Concurrency)
}

func spansOfKind(spans tracetest.SpanStubs, kind trace.SpanKind) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.SpanKind == kind {
			out = append(out, s)
		}
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

func randomQueue(t *testing.T) string {
	t.Helper()
	return outboxtest.RandomName("trace_")
}

// TestTraceMiddlewareAroundInbox checks that an Inbox handler behind TraceMiddleware runs in the
// middleware's span rather than a second one, and that the handler's error is recorded on it. The task
// has no event id, so the Inbox rejects it before it touches the database.
func TestTraceMiddlewareAroundInbox(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	db := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN("postgres://nobody@127.0.0.1:1/none?sslmode=disable"))), pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	in := worker.NewInbox(db, worker.WithTracerProvider(tp))
	var ran bool
	h := worker.TraceMiddleware(tp)(in.Handler("notify", func(context.Context, bun.Tx, *asynq.Task) error {
		ran = true
		return nil
	}))

	err := h.ProcessTask(context.Background(), asynq.NewTask("no.headers", nil))
	require.ErrorIs(t, err, worker.ErrMalformedTask)
	require.False(t, ran)
	spans := exp.GetSpans()
	require.Len(t, spans, 1, "one consumer span, not one per layer")
	require.Equal(t, trace.SpanKindConsumer, spans[0].SpanKind)
	require.Equal(t, codes.Error, spans[0].Status.Code)
	require.Equal(t, "no.headers", attrMap(spans[0].Attributes)["bunbox.event_name"])
	require.Equal(t, "process", spans[0].Name, "no queue outside an asynq server")
	require.False(t, spans[0].Parent.IsValid(), "no producer context in the headers: a root span")
}

func deleteQueue(opt asynq.RedisConnOpt, queue string) {
	ins := asynq.NewInspector(opt)
	_ = ins.DeleteQueue(queue, true)
	_ = ins.Close()
}
