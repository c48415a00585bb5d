package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// A caller queued behind the pipelines in flight leaves when its ctx ends, while those pipelines are still
// held, and the callers queued with it are served once they are released.
func TestPipelineHookWaiterHonorsCtx(t *testing.T) {
	outboxtest.SkipShort(t)
	rdb, h, n := pipelined(t, outboxtest.RedisAddr())
	release := make(chan struct{})
	n.gate = func() { <-release }
	released := sync.OnceFunc(func() { close(release) })
	t.Cleanup(released)
	ctx := context.Background()

	var leaders sync.WaitGroup
	for range pipelinesInFlight {
		leaders.Go(func() { require.NoError(t, rdb.Eval(ctx, "return 1", nil).Err()) })
	}
	outboxtest.WaitFor(t, 10*time.Second, "the pipelines in flight to be held", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.leaders == pipelinesInFlight
	})

	patient := make(chan error, 1)
	go func() { patient <- rdb.Eval(ctx, "return 2", nil).Err() }()
	waitQueued(t, h, 1)
	cctx, cancel := context.WithCancel(ctx)
	impatient := make(chan error, 1)
	go func() { impatient <- rdb.Eval(cctx, "return 3", nil).Err() }()
	waitQueued(t, h, 2)
	cancel()
	select {
	case err := <-impatient:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the caller whose ctx ended still waits behind the held pipelines")
	}
	waitQueued(t, h, 1)

	released()
	leaders.Wait()
	require.NoError(t, <-patient)
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Zero(t, h.leaders, "every lead was given back")
	require.Empty(t, h.queue)
}

func waitQueued(t *testing.T, h *pipelineHook, n int) {
	t.Helper()
	outboxtest.WaitFor(t, 10*time.Second, "callers queued", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.queue) == n
	})
}

// A call that gets the lead after its caller gave up does not send its own command, but sends the calls
// queued behind it and gives the lead back.
func TestPipelineHookCanceledLeaderPassesOn(t *testing.T) {
	outboxtest.SkipShort(t)
	_, h, _ := pipelined(t, outboxtest.RedisAddr())
	ctx := context.Background()
	own := &pipelineCall{cmd: redis.NewCmd(ctx, "eval", "return 1", 0), wake: make(chan bool, 1)}
	other := &pipelineCall{cmd: redis.NewCmd(ctx, "eval", "return 2", 0), wake: make(chan bool, 1)}
	h.mu.Lock()
	h.leaders = 1
	h.queue = append(h.queue, other)
	h.mu.Unlock()

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	h.lead(cctx, own)
	require.ErrorIs(t, own.cmd.Err(), context.Canceled)
	require.False(t, <-other.wake, "the queued call got its reply")
	v, err := other.cmd.(*redis.Cmd).Int()
	require.NoError(t, err)
	require.Equal(t, 2, v)
	require.Zero(t, h.leaders)
}
