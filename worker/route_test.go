package worker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/worker"
)

func TestArchiveUnrouted(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	mux := asynq.NewServeMux()
	handled := 0
	mux.HandleFunc("order.placed", func(context.Context, *asynq.Task) error { handled++; return nil })
	boom := errors.New("boom")
	mux.HandleFunc("order.failing", func(context.Context, *asynq.Task) error { return boom })
	h := worker.ArchiveUnrouted(mux, log)
	ctx := context.Background()

	t.Run("Routed", func(t *testing.T) {
		require.NoError(t, h.ProcessTask(ctx, asynq.NewTask("order.placed", nil)))
		require.Equal(t, 1, handled)
		require.ErrorIs(t, h.ProcessTask(ctx, asynq.NewTask("order.failing", nil)), boom)
	})
	t.Run("Unrouted", func(t *testing.T) {
		task := asynq.NewTaskWithHeaders("order.unknown", []byte(`{}`), map[string]string{wire.HeaderEventID: "0190c6f0-0000-7000-8000-000000000001"})
		err := h.ProcessTask(ctx, task)
		require.ErrorIs(t, err, asynq.SkipRetry, "archived, not retried")
		require.ErrorIs(t, err, asynq.ErrHandlerNotFound)
		require.ErrorContains(t, err, `"order.unknown"`)
		require.Contains(t, logs.String(), "no handler for the task type")
		require.Contains(t, logs.String(), "0190c6f0-0000-7000-8000-000000000001")
	})
}
