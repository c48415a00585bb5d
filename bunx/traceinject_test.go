package bunx_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// logBuffer is a slog destination the test reads back.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// tracedContext is a context with a sampled span and baggage of members of size bytes each.
func tracedContext(t *testing.T, members, size int) (context.Context, trace.Span) {
	t.Helper()
	var ms []baggage.Member
	for i := range members {
		m, err := baggage.NewMember(fmt.Sprintf("k%d", i), strings.Repeat("v", size))
		require.NoError(t, err)
		ms = append(ms, m)
	}
	bag, err := baggage.New(ms...)
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(baggage.ContextWithBaggage(context.Background(), bag), "produce")
	t.Cleanup(func() { span.End() })
	return ctx, span
}

func userMetadata(n int) []model.Option {
	opts := make([]model.Option, n)
	for i := range opts {
		opts[i] = model.WithMetadata(fmt.Sprintf("user-%02d", i), "v")
	}
	return opts
}

// TestTraceContextThatDoesNotFitIsLeftOut: what the context adds to an event's metadata never fails the
// business transaction nor makes the row one the relay refuses: the part that does not fit is left out and
// logged at Warn. Before the fix, 7 kB of baggage or 32 metadata keys plus traceparent committed, and the
// relay marked the row dead at once. Every event here is then delivered by a real relay.
func TestTraceContextThatDoesNotFitIsLeftOut(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	logs := &logBuffer{}
	b := setup(t, bunx.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	queue := outboxtest.RandomName("trace_")
	redisOpt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	t.Cleanup(func() {
		ins := asynq.NewInspector(redisOpt)
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	})

	record := func(ctx context.Context, ev *model.Event) {
		t.Helper()
		require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			return b.ob.Record(ctx, tx, ev)
		}))
	}
	metadataOf := func(ev *model.Event) map[string]string {
		t.Helper()
		var row model.Event
		require.NoError(t, b.db.NewSelect().Model(&row).Where("event_id = ?", ev.EventID).Scan(context.Background()))
		return row.Metadata
	}

	// 7 kB of baggage: the baggage is left out, the trace is kept.
	ctx, span := tracedContext(t, 7, 1000)
	huge, err := model.NewEvent("trace.huge_baggage", nil, model.WithQueue(queue))
	require.NoError(t, err)
	record(ctx, huge)
	md := metadataOf(huge)
	require.NotContains(t, md, "baggage")
	require.Contains(t, md[wire.HeaderTraceParent], span.SpanContext().TraceID().String())

	// 31 keys of the application's own, traceparent and a small baggage: 33 keys, one too many; the
	// baggage goes, the traceparent stays.
	ctx, span = tracedContext(t, 1, 10)
	crowded, err := model.NewEvent("trace.crowded", nil, append(userMetadata(31), model.WithQueue(queue))...)
	require.NoError(t, err)
	record(ctx, crowded)
	md = metadataOf(crowded)
	require.Len(t, md, wire.MaxMetadataCount)
	require.NotContains(t, md, "baggage")
	require.Contains(t, md[wire.HeaderTraceParent], span.SpanContext().TraceID().String())

	// 32 keys of the application's own: no room for any trace context.
	full, err := model.NewEvent("trace.full", nil, append(userMetadata(32), model.WithQueue(queue))...)
	require.NoError(t, err)
	record(ctx, full)
	md = metadataOf(full)
	require.Len(t, md, wire.MaxMetadataCount)
	require.NotContains(t, md, wire.HeaderTraceParent)

	out := logs.String()
	require.Contains(t, out, "level=WARN")
	require.Contains(t, out, "event_name=trace.huge_baggage")
	require.Contains(t, out, "dropped=[baggage]")
	require.Contains(t, out, "MaxMetadataValueLength")
	require.Contains(t, out, "event_name=trace.full")
	require.Contains(t, out, "dropped=\"[baggage traceparent]\"")
	require.NotContains(t, out, strings.Repeat("v", 100), "no baggage value in the log")

	// All three are delivered, none dead.
	r, err := relay.New(b.db, redisOpt, relay.Config{Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	runCtx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(runCtx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-stopped) })
	outboxtest.WaitFor(t, 30*time.Second, "the three events published", func() bool {
		return outboxtest.CountUndelivered(t, b.db, "") == 0
	})
	require.Zero(t, outboxtest.Count(t, b.db, "outbox_events", "dead_at IS NOT NULL"))
	ins := asynq.NewInspector(redisOpt)
	t.Cleanup(func() { _ = ins.Close() })
	for _, ev := range []*model.Event{huge, crowded, full} {
		_, err := ins.GetTaskInfo(queue, ev.EventID.String())
		require.NoError(t, err, "task of %s in asynq", ev.Name)
	}
}

// TestMetadataOfTheApplicationTooLargeFailsTheTransaction: metadata the application itself gave that is
// over the limits fails Record, and so the business transaction, with an error that names the limit.
func TestMetadataOfTheApplicationTooLargeFailsTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, _ := tracedContext(t, 1, 10)
	ev, err := model.NewEvent("too.large", nil)
	require.NoError(t, err)
	ev.Metadata = map[string]string{"note": strings.Repeat("x", wire.MaxMetadataValueLength+1)}
	err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&Order{Ref: "x"}).Exec(ctx); err != nil {
			return err
		}
		return b.ob.Record(ctx, tx, ev)
	})
	require.ErrorIs(t, err, model.ErrInvalidEvent)
	require.ErrorContains(t, err, `Metadata value of "note" is 4097 bytes, over the limit of 4096 (MaxMetadataValueLength)`)
	// The hook's order.placed was written in the failed transaction too: nothing is left.
	b.requireUnchanged(t)
}
