package worker

import (
	"time"

	"github.com/hibiken/asynq"
)

// The worker defaults that ServerConfig fills in.
const (
	taskCheckIntervalDefault        = 10 * time.Millisecond
	delayedTaskCheckIntervalDefault = 100 * time.Millisecond
)

// ServerConfig returns cfg with bunbox's worker defaults in its zero fields, for asynq.NewServer:
//
//   - TaskCheckInterval: 10ms (asynq's default is 1s). An asynq server that finds its queues empty sleeps
//     TaskCheckInterval before it looks again, so with asynq's default a task enqueued into an idle queue
//     waits up to a second for a worker, however fast the relay was. 10ms costs one cheap Redis poll per
//     10ms per idle server. docs/performance.md has the measured difference.
//
//   - DelayedTaskCheckInterval: 100ms (asynq's default is 5s). asynq moves scheduled tasks
//     (model.WithProcessAt, WithProcessIn) and tasks waiting for a retry into their queue only every
//     DelayedTaskCheckInterval, so with asynq's default a scheduled event runs up to 5s after its time. 100ms
//     costs two cheap script calls per queue per 100ms per server. asynq keeps the scheduled time in whole
//     seconds, so a scheduled task may still run up to 1s before its time, whatever the interval.
//
// Every other field is left as given: asynq's own defaults apply to those still zero.
//
//	srv := asynq.NewServer(redisOpt, worker.ServerConfig(asynq.Config{Concurrency: 20}))
func ServerConfig(cfg asynq.Config) asynq.Config {
	if cfg.TaskCheckInterval == 0 {
		cfg.TaskCheckInterval = taskCheckIntervalDefault
	}
	if cfg.DelayedTaskCheckInterval == 0 {
		cfg.DelayedTaskCheckInterval = delayedTaskCheckIntervalDefault
	}
	return cfg
}
