package taskmap

import (
	"github.com/google/uuid"

	"github.com/bunbox/bunbox/fanout"
)

// ListenerTaskID is the TaskID of a listener's task: "<event id>:<listener>".
func ListenerTaskID(eventID, listener string) string { return eventID + ":" + listener }

// IDs are the ids of the tasks the relay makes for event id of name: the event id, or one ListenerTaskID
// per listener of routes.
func IDs(routes fanout.Routes, id uuid.UUID, name string) []string {
	ls := routes[name]
	if len(ls) == 0 {
		return []string{id.String()}
	}
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = ListenerTaskID(id.String(), l)
	}
	return ids
}

// Lookup is one task of a row to look up: the row's index and the task's id.
type Lookup struct {
	Row    int
	TaskID string
}

// AppendLookups appends a look-up of every task (IDs) of row i, event id of name.
func AppendLookups(lookups []Lookup, routes fanout.Routes, i int, id uuid.UUID, name string) []Lookup {
	for _, tid := range IDs(routes, id, name) {
		lookups = append(lookups, Lookup{i, tid})
	}
	return lookups
}

// TaskKey is the Redis hash in which asynq v0.26 keeps a task (its "state" field says pending, active,
// scheduled, retry, archived, completed or aggregating); see asynq's internal/base.TaskKey. The ordering
// tests fail if a new asynq moves it.
func TaskKey(queue, id string) string { return "asynq:{" + queue + "}:t:" + id }

// QueuesKey is asynq's set of queue names (base.AllQueues).
const QueuesKey = "asynq:queues"
