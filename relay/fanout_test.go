package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

func TestRoutesValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		routes  fanout.Routes
		wantErr string
	}{
		{"None", nil, ""},
		{"Good", fanout.Routes{"order.placed": {"email", "stock"}}, ""},
		{"EmptyListener", fanout.Routes{"order.placed": {""}}, `Routes["order.placed"]: listener name "" must be non-empty`},
		{"SpaceInListener", fanout.Routes{"order.placed": {"send email"}}, `listener name "send email"`},
		{"Twice", fanout.Routes{"order.placed": {"email", "email"}}, `listener "email" is listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Config{Routes: tt.routes}.withDefaults().validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	require.PanicsWithValue(t, `fanout.Routes.Handle: no route from "order.placed" to listener "audit": add it to the Routes the relay runs with`,
		func() {
			fanout.Routes{"order.placed": {"email"}}.Handle(asynq.NewServeMux(), "order.placed", "audit", nil)
		})
}

// TestFanOut delivers each routed event as one task per listener, and a listener whose enqueue fails is
// retried without enqueuing the others twice.
func TestFanOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	routes := fanout.Routes{"order.placed": {"email", "stock"}}

	var placed []*model.Event
	for i := range 5 {
		ev, err := model.NewEvent("order.placed", map[string]int{"order": i}, model.WithQueue(b.queue), model.WithMetadata("tenant", "t1"))
		require.NoError(t, err)
		placed = append(placed, ev)
	}
	other, err := model.NewEvent("order.audited", nil, model.WithQueue(b.queue))
	require.NoError(t, err)
	_, err = b.db.NewInsert().Model(&[]*model.Event{placed[0], placed[1], placed[2], placed[3], placed[4], other}).Exec(ctx)
	require.NoError(t, err)

	failing := placed[2].EventID.String() + ":stock"
	var once sync.Once
	b.enq.setFail(func(id string) error {
		var err error
		if id == failing {
			once.Do(func() { err = errors.New("injected: stock enqueue refused") })
		}
		return err
	})
	r := b.newRelay(t, Config{Routes: routes, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Millisecond})
	run(t, r)
	outboxtest.WaitFor(t, 30*time.Second, "all rows published", func() bool { return published(t, b.db) == 6 })

	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, 5*2+1, info.Size, "one task per listener, one for the unrouted event")
	for _, ev := range placed {
		for _, l := range routes["order.placed"] {
			ti, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String()+":"+l)
			require.NoError(t, err)
			require.Equal(t, "order.placed:"+l, ti.Type)
			require.JSONEq(t, string(ev.Payload), string(ti.Payload))
			require.Equal(t, l, ti.Headers[wire.HeaderListener])
			require.Equal(t, ev.EventID.String(), ti.Headers[wire.HeaderEventID])
			require.Equal(t, "t1", ti.Headers["tenant"])
		}
	}
	ti, err := b.inspector.GetTaskInfo(b.queue, other.EventID.String())
	require.NoError(t, err)
	require.Equal(t, "order.audited", ti.Type)
	require.Equal(t, 2, b.enq.count(failing), "the failed listener was tried again")
	require.Equal(t, 2, b.enq.count(placed[2].EventID.String()+":email"), "the other listener's retry was a TaskID conflict")
}

// TestFanOutListenerRetriesAlone runs a worker: one listener fails its first run and is retried by asynq,
// while the other listener of the same event runs once.
func TestFanOutListenerRetriesAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	routes := fanout.Routes{"order.placed": {"email", "stock"}}
	ev, err := model.NewEvent("order.placed", map[string]int{"order": 1}, model.WithQueue(b.queue))
	require.NoError(t, err)
	_, err = b.db.NewInsert().Model(ev).Exec(context.Background())
	require.NoError(t, err)

	var mu sync.Mutex
	runs := map[string]int{}
	count := func(l string) int { mu.Lock(); defer mu.Unlock(); return runs[l] }
	handler := func(l string, failFirst bool) asynq.HandlerFunc {
		return func(_ context.Context, task *asynq.Task) error {
			mu.Lock()
			defer mu.Unlock()
			runs[l]++
			if failFirst && runs[l] == 1 {
				return errors.New("stock service down")
			}
			return nil
		}
	}
	mux := asynq.NewServeMux()
	routes.Handle(mux, "order.placed", "email", handler("email", false))
	routes.Handle(mux, "order.placed", "stock", handler("stock", true))
	srv := asynq.NewServer(b.redis, asynq.Config{
		Queues:            map[string]int{b.queue: 1},
		Concurrency:       2,
		TaskCheckInterval: 10 * time.Millisecond,
		RetryDelayFunc:    func(int, error, *asynq.Task) time.Duration { return 10 * time.Millisecond },
		Logger:            quietAsynqLogger{},
		LogLevel:          asynq.FatalLevel,
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	run(t, b.newRelay(t, Config{Routes: routes}))
	outboxtest.WaitFor(t, 30*time.Second, "stock retried to success", func() bool {
		ti, err := b.inspector.GetTaskInfo(b.queue, ev.EventID.String()+":stock")
		return err == nil && ti.State == asynq.TaskStateCompleted
	})
	outboxtest.WaitFor(t, 10*time.Second, "email handled", func() bool { return count("email") == 1 })
	require.Equal(t, 2, count("stock"))
	require.Equal(t, 1, count("email"), "the failing listener never made the other run again")
}

type quietAsynqLogger struct{}

func (quietAsynqLogger) Debug(...any)      {}
func (quietAsynqLogger) Info(...any)       {}
func (quietAsynqLogger) Warn(...any)       {}
func (quietAsynqLogger) Error(...any)      {}
func (quietAsynqLogger) Fatal(args ...any) { panic(fmt.Sprint(args...)) }
