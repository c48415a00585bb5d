package relay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// pipelineHook is a go-redis hook that sends the script calls of concurrent callers to Redis together, one
// pipeline per round trip, instead of one round trip each (auto-pipelining). asynq runs every enqueue as
// its own script call; with many enqueues in flight, the relay's go-redis client writes them in one
// syscall and Redis reads them in one, which cuts the CPU of both and lets one connection carry them all.
//
// There is no background goroutine: a caller that finds fewer than pipelinesInFlight pipelines in flight
// leads. It takes every call queued so far, sends them with its own as one pipeline, wakes their callers,
// and passes the lead to the first call that queued meanwhile. Each command keeps its own reply and
// error, as if sent alone; a connection error fails every command of its pipeline, as it would fail each
// of them alone.
type pipelineHook struct {
	rdb redis.UniversalClient

	calls sync.Pool // of *pipelineCall

	mu      sync.Mutex
	queue   []*pipelineCall // the calls waiting for a leader
	leaders int             // pipelines in flight, at most pipelinesInFlight
}

// pipelinesInFlight is how many pipelines one client sends at once: while one waits for its replies, the
// next one gathers.
const pipelinesInFlight = 2

type pipelineCall struct {
	cmd         redis.Cmder
	deadline    time.Time // of the caller's ctx, when hasDeadline
	hasDeadline bool
	wake        chan bool // receives true: lead the next pipeline; false: cmd has its reply
}

// latestDeadline is the latest deadline of the calls; none when a call has none.
func latestDeadline(calls []*pipelineCall) (time.Time, bool) {
	var d time.Time
	for _, c := range calls {
		if !c.hasDeadline {
			return time.Time{}, false
		}
		if c.deadline.After(d) {
			d = c.deadline
		}
	}
	return d, !d.IsZero()
}

func (h *pipelineHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook pipelines the script calls, which is what asynq's enqueue sends. Every other command goes
// alone: go-redis sends a new connection's handshake through the hooks too, and that must not wait in
// the queue behind the pipeline that is waiting for the connection.
func (h *pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "evalsha", "eval", "evalsha_ro", "eval_ro":
			return h.process(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

func (h *pipelineHook) process(ctx context.Context, cmd redis.Cmder) error {
	c, _ := h.calls.Get().(*pipelineCall)
	if c == nil {
		c = &pipelineCall{wake: make(chan bool, 1)}
	}
	c.cmd = cmd
	c.deadline, c.hasDeadline = ctx.Deadline()
	h.mu.Lock()
	lead := h.leaders < pipelinesInFlight
	if lead {
		h.leaders++
	} else {
		h.queue = append(h.queue, c)
	}
	h.mu.Unlock()
	if lead || h.wait(ctx, c) {
		h.lead(ctx, c)
	}
	c.cmd = nil
	h.calls.Put(c)
	return cmd.Err()
}

// wait waits for a queued call's turn: it returns true when the call is to lead the next pipeline, false
// when its command has its reply. A caller whose ctx ends while its call is still queued takes the call
// out and fails its command with ctx's error; a call that a leader already took gets its reply (bounded
// by that leader's deadline) or the lead, which it must pass on.
func (h *pipelineHook) wait(ctx context.Context, c *pipelineCall) bool {
	select {
	case lead := <-c.wake:
		return lead
	case <-ctx.Done():
	}
	h.mu.Lock()
	if i := slices.Index(h.queue, c); i >= 0 {
		h.queue = slices.Delete(h.queue, i, i+1)
		h.mu.Unlock()
		c.cmd.SetErr(ctx.Err())
		return false
	}
	h.mu.Unlock()
	return <-c.wake
}

// lead sends the leader's own call and every call queued so far as one pipeline, then hands the lead to
// the first call queued meanwhile, if any.
//
// A leader whose ctx has already ended (it got the lead after its caller gave up) does not send its own
// command, which fails with ctx's error, but still sends the others' and passes the lead on.
func (h *pipelineHook) lead(ctx context.Context, own *pipelineCall) {
	h.mu.Lock()
	batch := make([]*pipelineCall, 0, 1+len(h.queue))
	batch = append(append(batch, own), h.queue...)
	clear(h.queue)
	h.queue = h.queue[:0]
	h.mu.Unlock()
	if err := ctx.Err(); err != nil {
		own.cmd.SetErr(err)
		batch = batch[1:]
	}

	// The pipeline carries other callers' commands too: the leader's cancellation must not fail them, but
	// their deadlines (the relay's EnqueueTimeout) bound the connection's I/O: the latest of them, so
	// that no command is cut short by another's.
	pctx := context.WithoutCancel(ctx)
	if d, ok := latestDeadline(batch); ok {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(pctx, d)
		defer cancel()
	}
	if len(batch) > 0 {
		pipe := h.rdb.Pipeline()
		for _, c := range batch {
			_ = pipe.Process(pctx, c.cmd)
		}
		// The replies and errors land in each command, except when no connection could be had (Redis
		// down): then only Exec returns the error, and each command must get it, or it would read as a
		// success.
		if _, err := pipe.Exec(pctx); err != nil &&
			!slices.ContainsFunc(batch, func(c *pipelineCall) bool { return c.cmd.Err() != nil }) {
			for _, c := range batch {
				c.cmd.SetErr(err)
			}
		}
	}
	for _, c := range batch {
		if c != own {
			c.wake <- false
		}
	}

	h.mu.Lock()
	var next *pipelineCall
	if len(h.queue) > 0 {
		next = h.queue[0]
		h.queue = slices.Delete(h.queue, 0, 1)
	} else {
		h.leaders--
	}
	h.mu.Unlock()
	if next != nil {
		next.wake <- true
	}
}

// newClient makes the relay's asynq client on a Redis client of its own (pipelinedRedis), and returns
// both: asynq does not close a client it was given.
func newClient(opt asynq.RedisConnOpt) (*asynq.Client, redis.UniversalClient, error) {
	rdb, _, err := pipelinedRedis(opt)
	if err != nil {
		return nil, nil, err
	}
	return asynq.NewClientFromRedisClient(rdb), rdb, nil
}

// pipelinedRedis makes a go-redis client from opt with the pipelineHook, and with context deadlines
// applied to its connections' reads and writes: go-redis ignores them by default, so that an enqueue
// would wait for its ReadTimeout (3 s) rather than Config.EnqueueTimeout. Unusable options give an error
// rather than asynq's panic.
//
// On a Redis Cluster each node's client gets a pipelineHook of its own (the hook returned is nil): the
// cluster client routes each script call to the node of its keys' hash slot, follows MOVED and ASK
// redirections and retries TRYAGAIN and CLUSTERDOWN as for a command sent alone, and the node's hook
// sends the calls queued for that node as one pipeline. A hook on the cluster client itself would send
// one pipeline over every node, and each pipeline would wait for the slowest node.
func pipelinedRedis(opt asynq.RedisConnOpt) (redis.UniversalClient, *pipelineHook, error) {
	rdb, ok := opt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, nil, fmt.Errorf("relay: unusable Redis options %T: they make no go-redis client", opt)
	}
	// Set before the first command: the client reads its options as it goes, and makes the cluster's
	// node clients at its first command.
	switch c := rdb.(type) {
	case *redis.Client:
		c.Options().ContextTimeoutEnabled = true
	case *redis.ClusterClient:
		c.Options().ContextTimeoutEnabled = true
		c.OnNewNode(func(node *redis.Client) { node.AddHook(&pipelineHook{rdb: node}) })
		return rdb, nil, nil
	}
	h := &pipelineHook{rdb: rdb}
	rdb.AddHook(h)
	return rdb, h, nil
}
