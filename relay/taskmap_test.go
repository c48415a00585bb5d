package relay

import (
	"maps"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// optionValues maps each option's type to its value.
func optionValues(opts []asynq.Option) map[asynq.OptionType]any {
	m := make(map[asynq.OptionType]any, len(opts))
	for _, o := range opts {
		m[o.Type()] = o.Value()
	}
	return m
}

// A deliver goroutine's taskBuilder reuses its headers map and its queue and retention options: each task
// still carries its own event's headers and options, and a task made before is not changed by the next.
func TestTaskBuilderKeepsEachTaskItsOwn(t *testing.T) {
	t.Parallel()
	first, err := model.NewEvent("order.placed", map[string]int{"n": 1}, model.WithQueue("q1"),
		model.WithMetadata("k", "v"), model.WithTaskRetention(3*time.Hour), model.WithOrderingKey("o-1"))
	require.NoError(t, err)
	second, err := model.NewEvent("order.paid", map[string]int{"n": 2}, model.WithQueue("q2"))
	require.NoError(t, err)
	third, err := model.NewEvent("order.paid", map[string]int{"n": 3}, model.WithQueue("q2"))
	require.NoError(t, err)

	var b taskBuilder
	task1, opts1 := b.task(first, first.EventID.String(), time.Hour)
	want1 := maps.Clone(task1.Headers())
	task2, opts2 := b.task(second, second.EventID.String(), time.Hour)
	task3, opts3 := b.task(third, third.EventID.String(), time.Hour)

	require.Equal(t, want1, task1.Headers(), "the first task's headers after the builder made two more")
	require.Equal(t, "v", task1.Headers()["k"])
	require.Equal(t, "o-1", task1.Headers()[wire.HeaderOrderingKey])
	require.Equal(t, map[asynq.OptionType]any{
		asynq.TaskIDOpt: first.EventID.String(), asynq.QueueOpt: "q1", asynq.RetentionOpt: 3 * time.Hour,
	}, optionValues(opts1))

	for _, c := range []struct {
		ev   *model.Event
		task *asynq.Task
		opts []asynq.Option
	}{{second, task2, opts2}, {third, task3, opts3}} {
		require.Equal(t, map[string]string{
			wire.HeaderEventID:   c.ev.EventID.String(),
			wire.HeaderEventName: c.ev.Name,
			wire.HeaderCreatedAt: c.ev.CreatedAt.UTC().Format(time.RFC3339Nano),
		}, c.task.Headers(), "no header of an earlier event")
		require.Equal(t, map[asynq.OptionType]any{
			asynq.TaskIDOpt: c.ev.EventID.String(), asynq.QueueOpt: "q2", asynq.RetentionOpt: time.Hour,
		}, optionValues(c.opts))
	}
}
