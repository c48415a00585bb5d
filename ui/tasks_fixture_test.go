package ui_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
)

// testRedis is the Redis database of the page's tests; each test uses queues of its own.
func testRedis() asynq.RedisClientOpt {
	return asynq.RedisClientOpt{Addr: outboxtest.RedisAddr(), DB: 11}
}

// failTasks enqueues a task as the relay makes it (task id = the event id + suffix, bunbox's headers)
// for each id in a queue of its own, runs them under a handler that always fails ("handler failed:
// card declined"), and returns once asynq archived those of maxRetry 0 and holds the others for retry.
func failTasks(t *testing.T, queue string, maxRetry int, suffix string, ids ...uuid.UUID) {
	t.Helper()
	opt := testRedis()
	client := asynq.NewClient(opt)
	defer client.Close()
	ins := asynq.NewInspector(opt)
	defer ins.Close()
	var taskIDs []string
	for _, id := range ids {
		headers := map[string]string{wire.HeaderEventID: id.String(), wire.HeaderEventName: "order.placed"}
		if suffix != "" {
			headers[wire.HeaderListener] = suffix
		}
		taskID := id.String()
		if suffix != "" {
			taskID += ":" + suffix
		}
		taskIDs = append(taskIDs, taskID)
		_, err := client.Enqueue(asynq.NewTaskWithHeaders("order.placed", []byte(`{}`), headers), asynq.TaskID(taskID),
			asynq.Queue(queue), asynq.MaxRetry(maxRetry))
		require.NoError(t, err)
	}
	mux := asynq.NewServeMux()
	mux.HandleFunc("order.placed", func(context.Context, *asynq.Task) error { return errors.New("handler failed: card declined") })
	srv := asynq.NewServer(opt, asynq.Config{Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel,
		TaskCheckInterval: 10 * time.Millisecond, RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour }})
	require.NoError(t, srv.Start(mux))
	defer srv.Shutdown()
	outboxtest.WaitFor(t, 30*time.Second, "asynq fails every task once", func() bool {
		for _, id := range taskIDs {
			info, err := ins.GetTaskInfo(queue, id)
			if err != nil || (info.State != asynq.TaskStateArchived && info.State != asynq.TaskStateRetry) {
				return false
			}
		}
		return true
	})
}
