package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
)

// bunboxTask is a task as the relay makes it for event id of name: TaskID = the event id, the bunbox
// headers.
func bunboxTask(id uuid.UUID, name string) (*asynq.Task, asynq.Option) {
	return asynq.NewTaskWithHeaders(name, []byte(`{}`), map[string]string{wire.HeaderEventID: id.String(),
		wire.HeaderEventName: name}), asynq.TaskID(id.String())
}

// TestTasksCommand: a handler that always fails makes asynq archive bunbox's tasks (MaxRetry(0)) or keep
// one retrying; `tasks list` shows them and not the foreign tasks of the same queue, `tasks run` puts one
// back in line, `tasks delete` removes them, and the foreign tasks are never touched.
func TestTasksCommand(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	rds := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true}) // -all sees this test's tasks only
	redisOpt := asynq.RedisClientOpt{Addr: rds.Addr()}
	env := map[string]string{"REDIS_ADDR": rds.Addr()}
	const queue = "orders"

	mux := asynq.NewServeMux()
	mux.HandleFunc("order.placed", func(context.Context, *asynq.Task) error { return errors.New("always fails") })
	mux.HandleFunc("order.shipped", func(context.Context, *asynq.Task) error { return errors.New("always fails") })
	mux.HandleFunc("foreign.job", func(context.Context, *asynq.Task) error { return errors.New("always fails") })
	srv := asynq.NewServer(redisOpt, asynq.Config{Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel,
		TaskCheckInterval: 10 * time.Millisecond, RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour }})
	require.NoError(t, srv.Start(mux))
	client := asynq.NewClient(redisOpt)
	t.Cleanup(func() { _ = client.Close() })
	ins := asynq.NewInspector(redisOpt)
	t.Cleanup(func() { _ = ins.Close() })

	placed1, placed2, shipped, retrying := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	for _, ev := range []struct {
		id       uuid.UUID
		name     string
		maxRetry int
	}{{placed1, "order.placed", 0}, {placed2, "order.placed", 0}, {shipped, "order.shipped", 0}, {retrying, "order.placed", 5}} {
		task, id := bunboxTask(ev.id, ev.name)
		_, err := client.Enqueue(task, id, asynq.Queue(queue), asynq.MaxRetry(ev.maxRetry))
		require.NoError(t, err)
	}
	// Foreign tasks: no bunbox header, and a bunbox header whose id is not the task's.
	_, err := client.Enqueue(asynq.NewTask("foreign.job", nil), asynq.Queue(queue), asynq.TaskID("foreign-1"), asynq.MaxRetry(0))
	require.NoError(t, err)
	spoofed, _ := bunboxTask(placed1, "order.placed")
	_, err = client.Enqueue(spoofed, asynq.Queue(queue), asynq.TaskID("foreign-2"), asynq.MaxRetry(0))
	require.NoError(t, err)
	outboxtest.WaitFor(t, 10*time.Second, "asynq archives 5 tasks and retries 1", func() bool {
		info, err := ins.GetQueueInfo(queue)
		return err == nil && info.Archived == 5 && info.Retry == 1
	})
	srv.Shutdown() // nothing runs a task put back: it stays pending for the checks

	state := func(id string) asynq.TaskState {
		info, err := ins.GetTaskInfo(queue, id)
		if errors.Is(err, asynq.ErrTaskNotFound) {
			return 0
		}
		require.NoError(t, err)
		return info.State
	}

	t.Run("List", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "tasks", "list", "-json")
		require.Equal(t, 0, code, stderr)
		var tasks []taskJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &tasks))
		require.Len(t, tasks, 4, stdout)
		seen := map[string]string{}
		for _, tk := range tasks {
			seen[tk.TaskID] = tk.State
			require.Equal(t, tk.TaskID, tk.EventID)
			require.Equal(t, queue, tk.Queue)
			require.Equal(t, "always fails", tk.LastError)
		}
		require.Equal(t, map[string]string{placed1.String(): "archived", placed2.String(): "archived", shipped.String(): "archived",
			retrying.String(): "retry"}, seen)

		code, stdout, stderr = runCLI(t, env, "tasks", "list", "-state", "archived", "-name", "order.placed")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `QUEUE\s+STATE\s+TASK ID\s+TYPE\s+RETRIED\s+LAST FAILED\s+LAST ERROR\n`, stdout)
		require.Contains(t, stdout, placed1.String())
		require.Contains(t, stdout, placed2.String())
		require.NotContains(t, stdout, shipped.String())
		require.NotContains(t, stdout, retrying.String())
		require.NotContains(t, stdout, "foreign")

		unknown := uuid.New()
		code, _, stderr = runCLI(t, env, "tasks", "list", placed1.String(), unknown.String())
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, unknown.String()+": no archived or retry task of this event in asynq")
	})

	t.Run("Run", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "tasks", "run", placed1.String())
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "1 task put back in line (asynq runs them next)\n", stdout)
		require.Equal(t, asynq.TaskStatePending, state(placed1.String()))
		require.Equal(t, asynq.TaskStateArchived, state("foreign-2"), "the spoofed task of the same event id is not bunbox's")

		code, _, stderr = runCLI(t, env, "tasks", "run", placed1.String())
		require.Equal(t, 1, code, "the task is pending now: no failed task of the event")
		require.Contains(t, stderr, placed1.String()+": no archived or retry task")

		code, stdout, stderr = runCLI(t, env, "tasks", "run", "-name", "order.shipped")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "1 task put back in line (asynq runs them next)\n", stdout)
		require.Equal(t, asynq.TaskStatePending, state(shipped.String()))
	})

	t.Run("Delete", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "tasks", "delete", "-all")
		require.Equal(t, 2, code, stdout)
		require.Contains(t, stderr, "tasks delete would delete 2 tasks from asynq for good: add -yes to confirm")
		require.Equal(t, asynq.TaskStateArchived, state(placed2.String()), "nothing deleted without -yes")

		code, stdout, stderr = runCLI(t, env, "tasks", "delete", "-all", "-yes")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "2 tasks deleted from asynq\n", stdout)
		require.Zero(t, state(placed2.String()))
		require.Zero(t, state(retrying.String()))
		require.Equal(t, asynq.TaskStatePending, state(placed1.String()), "a pending task is not a failed one")
		require.Equal(t, asynq.TaskStateArchived, state("foreign-1"), "foreign tasks are left alone")
		require.Equal(t, asynq.TaskStateArchived, state("foreign-2"))

		code, stdout, stderr = runCLI(t, env, "tasks", "list")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "no archived or retry tasks of bunbox's events\n", stdout)
	})
}

func TestTasksUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"NoSub", []string{"tasks"}, "tasks needs list, run or delete"},
		{"Unknown", []string{"tasks", "retry"}, `unknown tasks command "retry"`},
		{"RunNothing", []string{"tasks", "run"}, "tasks run needs event ids, -name NAME or -all"},
		{"AllAndName", []string{"tasks", "delete", "-all", "-name", "a"}, "takes event ids and/or -name, or -all"},
		{"BadID", []string{"tasks", "run", "nope"}, `"nope" is not an event id`},
		{"BadState", []string{"tasks", "list", "-state", "pending"}, `-state is "pending": want archived or retry`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runCLI(t, nil, tt.args...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tt.want)
		})
	}
}
