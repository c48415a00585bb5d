package worker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/worker"
)

// lockedBuffer is a bytes.Buffer for a logger written from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A handler's error is logged: at Warn when asynq retries the task, at Error when it archives it (a payload
// that does not decode: the payload type without json tags reads 0 for every order instead).
func TestInboxLogsHandlerErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	var out lockedBuffer
	in := worker.NewInbox(db, worker.WithInboxLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))))

	failing := in.Handler("send-confirmation", func(context.Context, bun.Tx, *asynq.Task) error {
		return errors.New("no confirmation for order 0")
	})
	id := uuid.New()
	require.Error(t, failing.ProcessTask(ctx, inboxTask(t, id, `{}`)))
	require.Contains(t, out.String(), `level=WARN msg="bunbox inbox: handler failed, asynq retries the task" handler=send-confirmation task_type=order.placed event_id=`+id.String())
	require.Contains(t, out.String(), `err="no confirmation for order 0"`)

	decode := worker.HandleJSON(in, "ship", func(context.Context, bun.Tx, *shipment) error { return nil })
	require.ErrorIs(t, decode.ProcessTask(ctx, inboxTask(t, uuid.New(), `{"order_id":"seven"}`)), asynq.SkipRetry)
	require.Contains(t, out.String(), `level=ERROR msg="bunbox inbox: handler failed, asynq archives the task" handler=ship`)

	// A worker shutting down is no failure.
	before := out.String()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	stopped := in.Handler("stopped", func(ctx context.Context, _ bun.Tx, _ *asynq.Task) error { return ctx.Err() })
	require.Error(t, stopped.ProcessTask(cancelled, inboxTask(t, uuid.New(), `{}`)))
	require.Equal(t, before, out.String())
}
