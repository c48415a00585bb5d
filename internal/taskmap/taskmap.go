// Package taskmap is how an outbox row becomes an asynq task: the mapping the relay enqueues with, and
// that bunboxtest.Drain hands to a team's handlers, so that both build the same task.
package taskmap

import (
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// Builder makes the tasks of one goroutine, one at a time, and keeps what the
// next one can reuse: the headers map, which asynq.NewTaskWithHeaders copies, and the queue and retention
// options of the last task, immutable values. The options slice is made per task: an Enqueuer may keep it.
// The zero value is ready to use.
type Builder struct {
	headers map[string]string

	queue        string
	queueOpt     asynq.Option // asynq.Queue(queue), when not nil
	retention    time.Duration
	retentionOpt asynq.Option // asynq.Retention(retention), when not nil
}

// Task returns the task the relay enqueues for ev, with its options: type = event name, payload = the
// JSON payload (or the encoded bytes of PayloadEncoded, see bunx.WithLocation), headers = the event's
// metadata plus the bunbox headers, TaskID = id (the event id as a string, which the caller has at hand),
// queue = the event's queue, retention (the dedupe window) = taskRetention or the event's longer
// Retention, and the event's delivery options (model.WithProcessAt and the options after it), each as
// asynq's option of the same name.
func (b *Builder) Task(ev *model.Event, id string, taskRetention time.Duration) (*asynq.Task, []asynq.Option) {
	if b.headers == nil {
		b.headers = make(map[string]string, len(ev.Metadata)+4)
	}
	headers := b.headers
	clear(headers)
	for k, v := range ev.Metadata {
		headers[k] = v
	}
	headers[wire.HeaderEventID] = id
	headers[wire.HeaderEventName] = ev.Name
	headers[wire.HeaderCreatedAt] = ev.CreatedAt.UTC().Format(time.RFC3339Nano)
	if ev.OrderingKey != "" {
		headers[wire.HeaderOrderingKey] = ev.OrderingKey
	}
	if b.queueOpt == nil || ev.Queue != b.queue {
		b.queue, b.queueOpt = ev.Queue, asynq.Queue(ev.Queue)
	}
	if retention := max(taskRetention, ev.TaskRetention); b.retentionOpt == nil || retention != b.retention {
		b.retention, b.retentionOpt = retention, asynq.Retention(retention)
	}
	opts := []asynq.Option{asynq.TaskID(id), b.queueOpt, b.retentionOpt}
	opts = AppendDeliveryOptions(opts, ev)
	payload := ev.Payload
	if ev.PayloadEncoded != nil { // encoded by an Outbox's codec, not decoded: the bytes, for the consumer
		payload = ev.PayloadEncoded
	}
	return asynq.NewTaskWithHeaders(ev.Name, payload, headers), opts
}

// AppendDeliveryOptions appends the asynq options of ev's delivery options (model.WithProcessAt, ...),
// one for each that is set; unset ones leave asynq's defaults. ProcessAt maps to asynq.ProcessAt with the
// absolute time kept in the row: asynq schedules a task whose time is ahead and makes one whose time
// has passed pending (or aggregating, with a group) at once.
func AppendDeliveryOptions(opts []asynq.Option, ev *model.Event) []asynq.Option {
	if ev.ProcessAt != nil {
		opts = append(opts, asynq.ProcessAt(*ev.ProcessAt))
	}
	if ev.MaxRetry != nil {
		opts = append(opts, asynq.MaxRetry(*ev.MaxRetry))
	}
	if ev.Timeout > 0 {
		opts = append(opts, asynq.Timeout(ev.Timeout))
	}
	if ev.Deadline != nil {
		opts = append(opts, asynq.Deadline(*ev.Deadline))
	}
	if ev.Group != "" {
		opts = append(opts, asynq.Group(ev.Group))
	}
	return opts
}
