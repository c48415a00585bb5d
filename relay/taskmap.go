package relay

import (
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
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
// payload = the JSON payload (or the encoded bytes of PayloadEncoded, see bunx.WithCodec), headers = the event's metadata plus the bunbox headers, TaskID = the event
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
func listenerTaskID(eventID, listener string) string { return eventID + ":" + listener }

// listenerGroup is the asynq group of a listener's task when the event has a group: "<group>:<listener>",
// so that asynq aggregates each listener's tasks apart, as their task types ("<event>:<listener>") are.
func listenerGroup(group, listener string) string { return group + ":" + listener }

// taskIDs are the ids of the tasks the relay makes for event id of name: the event id, or one
// listenerTaskID per listener of routes.
func taskIDs(routes fanout.Routes, id uuid.UUID, name string) []string {
	ls := routes[name]
	if len(ls) == 0 {
		return []string{id.String()}
	}
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = listenerTaskID(id.String(), l)
	}
	return ids
}

// taskLookup is one task of a row to look up: the row's index and the task's id.
type taskLookup struct {
	row    int
	taskID string
}

// appendTaskLookups appends a look-up of every task (taskIDs) of row i, event id of name.
func appendTaskLookups(lookups []taskLookup, routes fanout.Routes, i int, id uuid.UUID, name string) []taskLookup {
	for _, tid := range taskIDs(routes, id, name) {
		lookups = append(lookups, taskLookup{i, tid})
	}
	return lookups
}

// asynqTaskKey is the Redis hash in which asynq v0.26 keeps a task (its "state" field says pending,
// active, scheduled, retry, archived, completed or aggregating); see asynq's internal/base.TaskKey. The
// ordering tests fail if a new asynq moves it.
func asynqTaskKey(queue, id string) string { return "asynq:{" + queue + "}:t:" + id }

// asynqQueuesKey is asynq's set of queue names (base.AllQueues).
const asynqQueuesKey = "asynq:queues"
