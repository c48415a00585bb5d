package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/wire"
)

// ArchiveUnrouted serves mux, except that a task whose type has no handler in mux fails with
// asynq.SkipRetry instead of asynq's plain "handler not found" error: asynq then archives it at once
// (kept, visible in the inspector, retryable by an operator) instead of retrying it MaxRetry times, and
// it is logged at Error level with its event id. The error wraps asynq.ErrHandlerNotFound.
// A bunbox event that nobody listens to is a deployment mistake to surface, not a transient failure:
//
//	srv.Start(worker.ArchiveUnrouted(mux, logger))
//
// A nil log discards the log line (the task is archived all the same). ArchiveUnrouted panics if mux is
// nil, at startup rather than at the first task.
func ArchiveUnrouted(mux *asynq.ServeMux, log *slog.Logger) asynq.Handler {
	if mux == nil {
		panic("worker.ArchiveUnrouted: mux must not be nil")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		h, pattern := mux.Handler(t)
		if pattern == "" {
			log.LogAttrs(ctx, slog.LevelError, "bunbox worker: no handler for the task type; archiving it",
				slog.String("task_type", t.Type()), slog.String("event_id", t.Headers()[wire.HeaderEventID]))
			return fmt.Errorf("%w %q: %w", asynq.ErrHandlerNotFound, t.Type(), asynq.SkipRetry)
		}
		return h.ProcessTask(ctx, t)
	})
}
