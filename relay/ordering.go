package relay

import "github.com/hibiken/asynq"

// Inspector is what the relay (for keyed events, model.WithOrderingKey, and cancels) and the Reconciler
// need from asynq: *asynq.Inspector implements it. GetTaskInfo must return an error wrapping
// asynq.ErrTaskNotFound or asynq.ErrQueueNotFound for a task Redis does not have. The Reconciler only
// looks tasks up.
type Inspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

var _ Inspector = (*asynq.Inspector)(nil)
