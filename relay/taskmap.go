package relay

import (
	"maps"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/taskmap"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// The task mapping, in one place: how an outbox row becomes asynq tasks (type, payload, headers, TaskID,
// options; one task per listener with Routes), and the Redis keys of asynq's that bunbox reads. The
// relay's enqueues, its keyed-event tracker, its cancels and the Reconciler all go through here.

// newTask builds the asynq task the relay enqueues for ev, with its options: type = event name,
// payload = the JSON payload (or the encoded bytes of PayloadEncoded, see the Location's Codec), headers = the event's metadata plus the bunbox headers, TaskID = the event
// id, queue = the event's queue, retention (the dedupe window) = taskRetention or the event's longer
// Retention, and the event's delivery options (model.WithProcessAt and the options after it), each as
// asynq's option of the same name. With Routes, listenerTask derives each listener's task from it.
//
// id is ev.EventID as a string, which the caller has at hand.
func newTask(ev *model.Event, id string, taskRetention time.Duration) (*asynq.Task, []asynq.Option) {
	var b taskBuilder
	return b.task(ev, id, taskRetention)
}

// taskBuilder makes the tasks of one goroutine (newTask's mapping, taskmap.Builder's), one at a time,
// reusing what the next one can. The zero value is ready to use.
type taskBuilder struct{ b taskmap.Builder }

// task is newTask's task and options for ev.
func (b *taskBuilder) task(ev *model.Event, id string, taskRetention time.Duration) (*asynq.Task, []asynq.Option) {
	return b.b.Task(ev, id, taskRetention)
}

// listenerTask is the task of listener l for ev, made from ev's own task and options (newTask): type
// fanout.ListenerTaskType, the listener in its headers, TaskID listenerTaskID, and the listener's group
// when the event has one.
func listenerTask(ev *model.Event, task *asynq.Task, opts []asynq.Option, l string) (*asynq.Task, []asynq.Option) {
	headers := maps.Clone(task.Headers())
	headers[wire.HeaderListener] = l
	lopts := append(slices.Clip(opts), asynq.TaskID(listenerTaskID(ev.EventID.String(), l)))
	if ev.Group != "" {
		lopts = append(lopts, asynq.Group(listenerGroup(ev.Group, l)))
	}
	return asynq.NewTaskWithHeaders(fanout.ListenerTaskType(ev.Name, l), ev.Payload, headers), lopts
}

// listenerTaskID is the TaskID of a listener's task: "<event id>:<listener>".
func listenerTaskID(eventID, listener string) string {
	return taskmap.ListenerTaskID(eventID, listener)
}

// listenerGroup is the asynq group of a listener's task when the event has a group: "<group>:<listener>",
// so that asynq aggregates each listener's tasks apart, as their task types ("<event>:<listener>") are.
func listenerGroup(group, listener string) string { return group + ":" + listener }
