package bunboxtest

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/internal/taskmap"
)

// maxDrainRounds bounds Drain's rounds: handlers that record events which record events, ... stop here.
const maxDrainRounds = 100

// Drain hands every pending event of the outbox (not delivered, dead or cancelled) to h, one at a time in
// the order they were written, as the task the relay would enqueue for it (type = event name, the payload,
// the metadata and bunbox's headers: worker.TaskEventID and worker.NewInbox read them), and marks each one
// delivered once h returns nil. h is usually the asynq.ServeMux the worker serves. Events that the handlers
// record are drained too, in further rounds, as long as db sees them.
//
// Drain runs the handlers at once, in the caller's goroutine: no relay, no Redis, no retry, and a
// scheduled event (model.WithProcessIn) runs now. The task has no asynq context (asynq.GetRetryCount
// reports false) and no ResultWriter; with fan-out routes the handler gets the event's own task, not one
// per listener. It returns how many events h handled. It stops at the first error of h (the event stays
// pending, the error names it: an asynq.ServeMux without a handler for the name answers "handler not
// found") or of the database.
func (o Outbox) Drain(ctx context.Context, db bun.IDB, h asynq.Handler) (int, error) {
	if h == nil {
		return 0, fmt.Errorf("bunboxtest: Drain: the handler is nil")
	}
	if err := o.Location.Validate(); err != nil {
		return 0, fmt.Errorf("bunboxtest: Outbox: %w", err)
	}
	t, _ := tables.New(o.Location.Schema, o.Location.TablePrefix)
	var b taskmap.Builder
	n := 0
	for range maxDrainRounds {
		evs, err := o.read(ctx, db, true, nil)
		if err != nil || len(evs) == 0 {
			return n, err
		}
		for _, ev := range evs {
			id := ev.EventID.String()
			task, _ := b.Task(ev, id, 0)
			if err := h.ProcessTask(ctx, task); err != nil {
				return n, fmt.Errorf("bunboxtest: Drain: the handler of event %s (%s) failed: %w", id, ev.Name, err)
			}
			if _, err := db.NewRaw("UPDATE ? SET published_at = now() WHERE id = ?", bun.Safe(t.Outbox()), ev.ID).Exec(ctx); err != nil {
				return n, fmt.Errorf("bunboxtest: Drain: mark event %s (%s) delivered: %w", id, ev.Name, err)
			}
			n++
		}
	}
	return n, fmt.Errorf("bunboxtest: Drain: events still pending after %d rounds: do the handlers record events without end?", maxDrainRounds)
}
