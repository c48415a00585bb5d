package worker_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/worker"
)

// unconnected is a *bun.DB that never connects: enough for what these tests reach.
func unconnected(t *testing.T) *bun.DB {
	t.Helper()
	db := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithAddr("127.0.0.1:1"))), pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Nil loggers and nil options are defaults, not panics.
func TestNilOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ArchiveUnroutedNilLogger", func(t *testing.T) {
		t.Parallel()
		h := worker.ArchiveUnrouted(asynq.NewServeMux(), nil)
		err := h.ProcessTask(ctx, asynq.NewTaskWithHeaders("nobody.listens", nil, map[string]string{model.HeaderEventID: "x"}))
		require.ErrorIs(t, err, asynq.SkipRetry, "archived, not retried")
		require.ErrorIs(t, err, asynq.ErrHandlerNotFound)
	})

	t.Run("ArchiveUnroutedNilMux", func(t *testing.T) {
		t.Parallel()
		require.PanicsWithValue(t, "worker.ArchiveUnrouted: mux must not be nil", func() { worker.ArchiveUnrouted(nil, nil) })
	})

	t.Run("InboxNilLoggerAndOption", func(t *testing.T) {
		t.Parallel()
		in := worker.NewInbox(unconnected(t), nil, worker.WithInboxLogger(nil))
		h := in.Handler("h", func(context.Context, bun.Tx, *asynq.Task) error { return nil })
		err := h.ProcessTask(ctx, asynq.NewTask("no.headers", nil))
		require.ErrorIs(t, err, worker.ErrMalformedTask, "the rejection is logged through the default logger")
	})

	t.Run("InboxNilHandler", func(t *testing.T) {
		t.Parallel()
		in := worker.NewInbox(unconnected(t))
		require.PanicsWithValue(t, `worker.Inbox.Handler("h"): fn must not be nil`, func() { in.Handler("h", nil) })
		require.PanicsWithValue(t, `worker.HandleJSON("h"): fn must not be nil`, func() {
			worker.HandleJSON[struct{}](in, "h", nil)
		})
	})

}
