package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/model"
)

// deliverer enqueues the rows a round read, whichever way it read them, at most Concurrency at once over
// all the relay's workers: one task per row, or one per listener with Config.Routes, in a publish span,
// reported to Observer.OnEnqueue (publish.go), the payload decoded for its enqueue only (decoded.go).
type deliverer struct {
	cfg     *Config
	enq     Enqueuer
	sem     chan struct{} // bounds the enqueues in flight, over all workers
	decoded decodedBudget // bounds the payloads decoded at once with Config.Location.Codec (decoded.go)
	// rerun enqueues again the archived task of a keyed event the operator retried (the key tracker's).
	rerun func(ctx context.Context, task *asynq.Task, opts []asynq.Option) error
}

// errReleased marks a claimed row that was not tried because the relay is stopping.
var errReleased = errors.New("relay: stopping, row released")

// deliver enqueues the events, at most Concurrency at once over all workers, and returns one error per
// event: nil when it reached Redis (a TaskID conflict means it already had), errReleased when ctx ended
// before it was tried, the error in bad for a malformed row, which is not tried, and for a payload that
// does not decode (see publishDecoded: the rows keep their stored payloads). Enqueues already started
// finish even when ctx ends, bounded by EnqueueTimeout. A few long-lived goroutines take the events in
// order, rather than one goroutine per event: their stacks stay grown for go-redis's deep call chains.
//
// The id of each row that reached Redis goes to delivered as soon as it did (see markQueue).
func (d *deliverer) deliver(ctx context.Context, events []model.Event, bad map[int]error, delivered func(int64)) []error {
	errs := make([]error, len(events))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(d.cfg.Concurrency, len(events)) {
		wg.Go(func() {
			p := publisher{d: d, round: ctx, parent: context.WithoutCancel(ctx)}
			defer p.close()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(events) {
					return
				}
				if err := bad[i]; err != nil {
					errs[i] = err
					continue
				}
				// A slot per event, not per goroutine: another round's rows (a critical queue's among
				// them) get the next free slot, rather than waiting for this batch to run out.
				select {
				case <-ctx.Done():
					errs[i] = errReleased
					continue
				case d.sem <- struct{}{}:
				}
				errs[i] = d.publishDecoded(ctx, &p, &events[i]) // decoded for its enqueue only (decoded.go)
				<-d.sem
				if errs[i] == nil {
					delivered(events[i].ID)
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// enqueue puts ev's task into Redis, or with Routes one task per listener; the row counts as delivered
// once all of them are there. A retry after a partial failure finds the listeners already enqueued as
// TaskID conflicts. ctx bounds it (publisher.enqueueCtx: EnqueueTimeout); id is ev.EventID as a string;
// tasks is the calling goroutine's.
func (d *deliverer) enqueue(ctx context.Context, ev *model.Event, id string, tasks *taskBuilder) error {
	task, opts := tasks.task(ev, id, d.cfg.TaskRetention)
	listeners := d.cfg.Routes[ev.Name]
	if len(listeners) == 0 {
		return d.enqueueTask(ctx, ev, task, opts)
	}
	for _, l := range listeners {
		ltask, lopts := listenerTask(ev, task, opts, l)
		if err := d.enqueueTask(ctx, ev, ltask, lopts); err != nil {
			return fmt.Errorf("listener %s: %w", l, err)
		}
	}
	return nil
}

func (d *deliverer) enqueueTask(ctx context.Context, ev *model.Event, task *asynq.Task, opts []asynq.Option) error {
	_, err := d.enq.EnqueueContext(ctx, task, opts...)
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict) && ev.OrderingKey != "":
		return d.rerun(ctx, task, opts) // a keyed event retried by the operator
	case errors.Is(err, asynq.ErrTaskIDConflict), errors.Is(err, asynq.ErrDuplicateTask):
		return nil // already delivered
	}
	return err // the task's own (see taskOwn) or an outage
}
