package relay

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// pipelined returns a go-redis client with the relay's pipelineHook, and a counter of the pipelines it
// sends.
func pipelined(t *testing.T, addr string) (redis.UniversalClient, *pipelineHook, *pipelineCounter) {
	t.Helper()
	rdb, h, err := pipelinedRedis(asynq.RedisClientOpt{Addr: addr})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	n := &pipelineCounter{}
	rdb.AddHook(n)
	return rdb, h, n
}

// pipelineCounter counts pipelines and their commands; gate, when set, runs before each pipeline is sent.
type pipelineCounter struct {
	gate func()

	mu                           sync.Mutex
	pipelines, commands, largest int
}

func (n *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (n *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (n *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if n.gate != nil {
			n.gate()
		}
		n.mu.Lock()
		n.pipelines++
		n.commands += len(cmds)
		n.largest = max(n.largest, len(cmds))
		n.mu.Unlock()
		return next(ctx, cmds)
	}
}

// Concurrent commands share round trips, and each caller gets its own reply and its own error.
func TestPipelineHookRepliesPerCommand(t *testing.T) {
	outboxtest.SkipShort(t)
	rdb, h, n := pipelined(t, outboxtest.RedisAddr())
	// While the first pipelines are held, the other callers queue up: they must then go together.
	var held sync.Once
	n.gate = func() {
		held.Do(func() {
			outboxtest.WaitFor(t, 10*time.Second, "callers queued behind the pipelines in flight", func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return len(h.queue) >= 16
			})
		})
	}
	ctx := context.Background()
	prefix := "bunbox_pipeline_" + randHex(6) + ":"
	t.Cleanup(func() {
		for i := range 64 {
			_ = rdb.Del(ctx, prefix+strconv.Itoa(i)).Err()
		}
	})

	incr := redis.NewScript("return redis.call('INCR', KEYS[1])")
	const callers, rounds = 64, 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			key := prefix + strconv.Itoa(i)
			for j := range rounds {
				if i%8 == 0 {
					// A script Redis refuses fails alone.
					if err := rdb.Eval(ctx, "return redis.call('bunbox-no-such-command')", nil).Err(); err == nil {
						errs <- fmt.Errorf("caller %d: an unknown command succeeded", i)
						return
					}
					continue
				}
				v, err := incr.Run(ctx, rdb, []string{key}).Int64()
				if err != nil || v != int64(j+1) {
					errs <- fmt.Errorf("caller %d round %d: INCR = %d, %v; want %d", i, j, v, err, j+1)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	require.GreaterOrEqual(t, n.commands, callers*rounds, "every script call went through a pipeline")
	require.GreaterOrEqual(t, n.largest, 16, "the queued callers went in one pipeline")
	t.Logf("%d commands in %d pipelines, the largest of %d", n.commands, n.pipelines, n.largest)
}

// When Redis goes away, every waiting command fails with the connection's error, none hangs, and the
// client works again once Redis is back.
func TestPipelineHookServerDown(t *testing.T) {
	outboxtest.SkipShort(t)
	srv := outboxtest.StartRedis(t, nil)
	rdb, _, _ := pipelined(t, srv.Addr())
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())

	srv.Stop(t)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := rdb.Eval(ctx, "return redis.call('SET', 'k', 'v')", nil).Err(); err == nil {
				t.Error("SET succeeded with Redis stopped")
			}
		})
	}
	wg.Wait()

	srv.Start(t)
	outboxtest.WaitFor(t, 10*time.Second, "the pipelined client to reach Redis again", func() bool {
		return rdb.Eval(ctx, "return redis.call('SET', 'k', 'v')", nil).Err() == nil
	})
}

// A hung Redis fails the pipeline at the caller's deadline (the relay's EnqueueTimeout), not later.
func TestPipelineHookHonorsDeadline(t *testing.T) {
	outboxtest.SkipShort(t)
	srv := outboxtest.StartRedis(t, nil)
	rdb, _, _ := pipelined(t, srv.Addr())
	ctx := context.Background()
	require.NoError(t, rdb.Eval(ctx, "return 1", nil).Err()) // a connection in the pool

	thaw := srv.Freeze(t)
	defer thaw()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := rdb.Eval(ctx, "return 1", nil).Err()
			if err == nil {
				t.Error("a script ran on a frozen Redis")
			}
			// go-redis's own read timeout is 3 s: returning well before it shows the deadline bounds the
			// pipeline.
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the call returned after %v, its deadline was 300ms (err %v)", took, err)
			}
		})
	}
	wg.Wait()
	thaw()
	outboxtest.WaitFor(t, 10*time.Second, "the client to work again", func() bool {
		return rdb.Eval(ctx, "return 1", nil).Err() == nil
	})
}

// On a Redis Cluster every node's client pipelines the script calls routed to it: each caller gets its
// own reply from the node of its key, and a script Redis refuses fails alone.
func TestPipelineHookPerClusterNode(t *testing.T) {
	t.Parallel()
	c := outboxtest.StartRedisCluster(t, &outboxtest.RedisOptions{NoPersistence: true})
	rdb, h, err := pipelinedRedis(asynq.RedisClusterClientOpt{Addrs: c.Addrs()})
	require.NoError(t, err)
	require.Nil(t, h, "no hook on the cluster client itself")
	t.Cleanup(func() { _ = rdb.Close() })
	var mu sync.Mutex
	counters := map[string]*pipelineCounter{}
	rdb.(*redis.ClusterClient).OnNewNode(func(node *redis.Client) {
		n := &pipelineCounter{}
		node.AddHook(n)
		mu.Lock()
		counters[node.Options().Addr] = n
		mu.Unlock()
	})

	ctx := context.Background()
	incr := redis.NewScript("return redis.call('INCR', KEYS[1])")
	const callers, rounds = 48, 40
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			key := "{bunbox_pipeline_" + strconv.Itoa(i) + "}"
			for j := range rounds {
				if i%8 == 0 {
					if err := rdb.Eval(ctx, "return redis.call('bunbox-no-such-command')", []string{key}).Err(); err == nil {
						errs <- fmt.Errorf("caller %d: an unknown command succeeded", i)
						return
					}
					continue
				}
				v, err := incr.Run(ctx, rdb, []string{key}).Int64()
				if err != nil || v != int64(j+1) {
					errs <- fmt.Errorf("caller %d round %d: INCR = %d, %v; want %d", i, j, v, err, j+1)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, addr := range c.Addrs() {
		n := counters[addr]
		require.NotNil(t, n, "node %s used", addr)
		n.mu.Lock()
		require.Positive(t, n.pipelines, "node %s got pipelines", addr)
		total += n.commands
		t.Logf("node %s: %d commands in %d pipelines, the largest of %d", addr, n.commands, n.pipelines, n.largest)
		n.mu.Unlock()
	}
	require.GreaterOrEqual(t, total, callers*rounds, "every script call went through a node's pipeline")
}
