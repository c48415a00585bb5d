package worker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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
	require.Contains(t, out.String(), `level=ERROR msg="bunbox inbox: handler failed, asynq archives the task and will not retry it (asynq.SkipRetry)" handler=ship`)

	// A worker shutting down is no failure.
	before := out.String()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	stopped := in.Handler("stopped", func(ctx context.Context, _ bun.Tx, _ *asynq.Task) error { return ctx.Err() })
	require.Error(t, stopped.ProcessTask(cancelled, inboxTask(t, uuid.New(), `{}`)))
	require.Equal(t, before, out.String())
}

// TestInboxLogsTheLastAttemptAtError runs a handler that always fails under a real asynq server, with
// MaxRetry(1): the first run is logged at Warn (asynq retries it), the second, the last, at Error, naming
// the task (type, id, queue) and that asynq will not retry it; then asynq archives the task.
func TestInboxLogsTheLastAttemptAtError(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	redisOpt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	queue := outboxtest.RandomName("lastattempt")
	ins := asynq.NewInspector(redisOpt)
	t.Cleanup(func() { deleteQueue(redisOpt, queue); _ = ins.Close() })

	var out lockedBuffer
	in := worker.NewInbox(db, worker.WithInboxLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	mux := asynq.NewServeMux()
	mux.Handle("order.placed", in.Handler("always-fails", func(context.Context, bun.Tx, *asynq.Task) error {
		return errors.New("boom")
	}))
	srv := asynq.NewServer(redisOpt, worker.ServerConfig(asynq.Config{Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return 0 }}))
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	client := asynq.NewClient(redisOpt)
	t.Cleanup(func() { _ = client.Close() })
	id := uuid.New()
	_, err := client.Enqueue(inboxTask(t, id, `{}`), asynq.Queue(queue), asynq.TaskID(id.String()), asynq.MaxRetry(1))
	require.NoError(t, err)

	outboxtest.WaitFor(t, 10*time.Second, "asynq archives the task", func() bool {
		info, err := ins.GetTaskInfo(queue, id.String())
		return err == nil && info.State == asynq.TaskStateArchived
	})
	task := `handler=always-fails task_type=order.placed task_id=` + id.String() + ` queue=` + queue + ` event_id=` + id.String()
	require.Contains(t, out.String(), `level=WARN msg="bunbox inbox: handler failed, asynq retries the task" `+task+` retried=0 max_retry=1 err=boom`)
	require.Contains(t, out.String(), `level=ERROR msg="bunbox inbox: handler failed on the task's last attempt, asynq archives the task and will not retry it" `+
		task+` retried=1 max_retry=1 err=boom`)
	require.Equal(t, 1, strings.Count(out.String(), "level=WARN"), out.String())
	require.Equal(t, 1, strings.Count(out.String(), "level=ERROR"), out.String())
}
