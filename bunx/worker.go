package bunx

import (
	"time"

	"github.com/hibiken/asynq"
)

// TaskCheckIntervalDefault is the TaskCheckInterval that ServerConfig gives a worker.
const TaskCheckIntervalDefault = 10 * time.Millisecond

// ServerConfig returns cfg with bunbox's worker defaults in its zero fields, for asynq.NewServer:
//
//   - TaskCheckInterval: 10ms (asynq's default is 1s). An asynq server that finds its queues empty sleeps
//     TaskCheckInterval before it looks again, so with asynq's default a task enqueued into an idle queue
//     waits up to a second for a worker, however fast the relay was. 10ms costs one cheap Redis poll per
//     10ms per idle server. The README's "Worker defaults" section has the measured difference.
//
// Every other field is left as given: asynq's own defaults apply to those still zero.
//
//	srv := asynq.NewServer(redisOpt, bunx.ServerConfig(asynq.Config{Concurrency: 20}))
func ServerConfig(cfg asynq.Config) asynq.Config {
	if cfg.TaskCheckInterval == 0 {
		cfg.TaskCheckInterval = TaskCheckIntervalDefault
	}
	return cfg
}
