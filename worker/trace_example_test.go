package worker_test

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/worker"
)

// A worker with bunbox's defaults whose handlers continue the producers' traces. The spans go to the
// global TracerProvider unless worker.WithTracerProvider names another.
func ExampleTraceMiddleware() {
	cfg := worker.ServerConfig(asynq.Config{Concurrency: 20, Queues: map[string]int{"default": 1}})
	mux := asynq.NewServeMux()
	mux.Use(worker.TraceMiddleware(nil))
	mux.HandleFunc("order.placed", func(ctx context.Context, t *asynq.Task) error {
		// ctx holds the consumer span "process default", the child of the span that placed the order.
		return nil
	})
	// asynq.NewServer(redisOpt, cfg).Run(mux) would serve until SIGTERM.
	fmt.Println(cfg.TaskCheckInterval)
	// Output: 10ms
}
