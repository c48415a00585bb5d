package bunx_test

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/bunx"
)

// A worker with bunbox's defaults whose handlers continue the producers' traces. The spans go to the
// global TracerProvider unless bunx.WithTracerProvider names another.
func ExampleTraceMiddleware() {
	cfg := bunx.ServerConfig(asynq.Config{Concurrency: 20, Queues: map[string]int{"default": 1}})
	mux := asynq.NewServeMux()
	mux.Use(bunx.TraceMiddleware())
	mux.HandleFunc("order.placed", func(ctx context.Context, t *asynq.Task) error {
		// ctx holds the consumer span "process default", the child of the span that placed the order.
		return nil
	})
	// asynq.NewServer(redisOpt, cfg).Run(mux) would serve until SIGTERM.
	fmt.Println(cfg.TaskCheckInterval)
	// Output: 10ms
}
