package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/model"
)

// errReleased marks a claimed row that was not tried because the relay is stopping.
var errReleased = errors.New("bunbox: relay stopping, row released")

// Task builds the asynq task the relay enqueues for ev, with its options: type = event name,
// payload = the JSON payload, headers = the event's metadata plus the bunbox headers, TaskID = the event
// id, queue = the event's queue, and retention (the dedupe window) = taskRetention.
func Task(ev *model.Event, taskRetention time.Duration) (*asynq.Task, []asynq.Option) {
	headers := make(map[string]string, len(ev.Metadata)+3)
	for k, v := range ev.Metadata {
		headers[k] = v
	}
	headers[model.HeaderEventID] = ev.EventID.String()
	headers[model.HeaderEventName] = ev.Name
	headers[model.HeaderCreatedAt] = ev.CreatedAt.UTC().Format(time.RFC3339Nano)
	opts := []asynq.Option{
		asynq.TaskID(ev.EventID.String()),
		asynq.Queue(ev.Queue),
		asynq.Retention(taskRetention),
	}
	return asynq.NewTaskWithHeaders(ev.Name, ev.Payload, headers), opts
}

// deliver enqueues the events, at most Concurrency at once, and returns one error per event: nil when it
// reached Redis (a TaskID conflict means it already had), errReleased when ctx ended before it was tried.
// Enqueues already started finish even when ctx ends, bounded by EnqueueTimeout.
func (r *Relay) deliver(ctx context.Context, events []model.Event) []error {
	errs := make([]error, len(events))
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range events {
		select {
		case <-ctx.Done():
			errs[i] = errReleased
			continue
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = r.enqueue(ctx, &events[i])
		})
	}
	wg.Wait()
	return errs
}

func (r *Relay) enqueue(ctx context.Context, ev *model.Event) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.EnqueueTimeout)
	defer cancel()
	task, opts := Task(ev, r.cfg.TaskRetention)
	_, err := r.enq.EnqueueContext(ctx, task, opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil // already delivered
	}
	return err
}
