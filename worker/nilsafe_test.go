package worker_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/worker"
)

// Nil loggers and nil options are defaults, not panics.
func TestNilOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ArchiveUnroutedNilLogger", func(t *testing.T) {
		t.Parallel()
		h := worker.ArchiveUnrouted(asynq.NewServeMux(), nil)
		err := h.ProcessTask(ctx, asynq.NewTaskWithHeaders("nobody.listens", nil, map[string]string{wire.HeaderEventID: "x"}))
		require.ErrorIs(t, err, asynq.SkipRetry, "archived, not retried")
		require.ErrorIs(t, err, asynq.ErrHandlerNotFound)
	})

	t.Run("ArchiveUnroutedNilMux", func(t *testing.T) {
		t.Parallel()
		require.PanicsWithValue(t, "worker.ArchiveUnrouted: mux must not be nil", func() { worker.ArchiveUnrouted(nil, nil) })
	})

	t.Run("InboxNilLoggerAndOption", func(t *testing.T) {
		t.Parallel()
		in := worker.NewInbox(outboxtest.Unconnected(t), nil, worker.WithInboxLogger(nil))
		h := in.Handler("h", func(context.Context, bun.Tx, *asynq.Task) error { return nil })
		err := h.ProcessTask(ctx, asynq.NewTask("no.headers", nil))
		require.ErrorIs(t, err, worker.ErrMalformedTask, "the rejection is logged through the default logger")
	})

	t.Run("InboxNilHandler", func(t *testing.T) {
		t.Parallel()
		in := worker.NewInbox(outboxtest.Unconnected(t))
		require.PanicsWithValue(t, `worker.Inbox.Handler("h"): fn must not be nil`, func() { in.Handler("h", nil) })
		require.PanicsWithValue(t, `worker.HandleJSON("h"): fn must not be nil`, func() {
			worker.HandleJSON[struct{}](in, "h", nil)
		})
	})

}
