package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// `bunbox status` shows what asynq holds per queue, the handlers' failures included: a task retrying and
// a task archived; with Redis down it still prints the outbox's figures and fails naming Redis.
func TestStatusShowsAsynqQueues(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, db := schemaEnv(t)
	rd := outboxtest.StartRedis(t, nil)
	env["REDIS_ADDR"] = rd.Addr()
	insertEvent(t, db, "order.placed", "handlers", "")
	redisOpt := asynq.RedisClientOpt{Addr: rd.Addr()}

	client := asynq.NewClient(redisOpt)
	t.Cleanup(func() { _ = client.Close() })
	for _, typ := range []string{"fails", "refuses", "works"} {
		_, err := client.Enqueue(asynq.NewTask(typ, nil), asynq.Queue("handlers"), asynq.Retention(time.Hour))
		require.NoError(t, err)
	}
	mux := asynq.NewServeMux()
	mux.HandleFunc("fails", func(context.Context, *asynq.Task) error { return errors.New("order 0 not found") })
	mux.HandleFunc("refuses", func(context.Context, *asynq.Task) error { return fmt.Errorf("bad payload: %w", asynq.SkipRetry) })
	mux.HandleFunc("works", func(context.Context, *asynq.Task) error { return nil })
	srv := asynq.NewServer(redisOpt, asynq.Config{
		Queues: map[string]int{"handlers": 1}, TaskCheckInterval: 10 * time.Millisecond,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour }, // stays in the retry set
		LogLevel:       asynq.FatalLevel,
	})
	require.NoError(t, srv.Start(mux))
	ins := asynq.NewInspector(redisOpt)
	t.Cleanup(func() { _ = ins.Close() })
	outboxtest.WaitFor(t, 30*time.Second, "one task retrying, one archived, one completed", func() bool {
		info, err := ins.GetQueueInfo("handlers")
		return err == nil && info.Retry == 1 && info.Archived == 1 && info.Completed == 1
	})
	srv.Shutdown()

	code, stdout, stderr := runCLI(t, env, "status", "-json")
	require.Equal(t, 0, code, stderr)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Equal(t, []queueStatus{{Queue: "handlers", Retry: 1, Archived: 1, Completed: 1}}, rep.Queues)
	require.EqualValues(t, 1, rep.Pending)

	code, stdout, stderr = runCLI(t, env, "status")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `ASYNQ QUEUE +PENDING +ACTIVE +SCHEDULED +RETRY +ARCHIVED +COMPLETED\nhandlers +0 +0 +0 +1 +1 +1\n`, stdout)

	rd.Stop(t)
	code, stdout, stderr = runCLI(t, env, "status")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "pending", "the outbox's figures are still printed")
	require.Contains(t, stdout, "asynq's queues: unreadable")
	require.Contains(t, stderr, "read asynq's queues (Redis at "+rd.Addr()+")")
	code, stdout, stderr = runCLI(t, env, "status", "-asynq=false")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "asynq")
}
