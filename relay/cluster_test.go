package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// clusterBundle: a fresh schema, a private 3-node Redis Cluster, and queues spread over its nodes
// (asynq keeps a queue's keys in the hash slot of "{<queue>}", so each queue lives on one node).
type clusterBundle struct {
	db      *bun.DB
	cluster *outboxtest.RedisCluster
	opt     asynq.RedisClusterClientOpt
	queues  []string       // two per node
	nodeOf  map[string]int // queue → index of its node in cluster.Nodes
}

func setupCluster(t testing.TB, opts *outboxtest.RedisOptions) *clusterBundle {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	c := outboxtest.StartRedisCluster(t, opts)
	b := &clusterBundle{db: db, cluster: c, opt: asynq.RedisClusterClientOpt{Addrs: c.Addrs()}, nodeOf: map[string]int{}}
	perNode := map[int]int{}
	for i := 0; len(b.queues) < 6; i++ {
		q := fmt.Sprintf("shard%d", i)
		n := c.NodeOf(t, "asynq:{"+q+"}:pending")
		if perNode[n] < 2 {
			perNode[n]++
			b.queues = append(b.queues, q)
			b.nodeOf[q] = n
		}
	}
	return b
}

// insert adds n events per queue.
func (b *clusterBundle) insert(t testing.TB, n int) []*model.Event {
	t.Helper()
	var events []*model.Event
	for _, q := range b.queues {
		for i := range n {
			ev, err := model.NewEvent("cluster.test", map[string]int{"n": i}, model.WithQueue(q))
			require.NoError(t, err)
			events = append(events, ev)
		}
	}
	_, err := b.db.NewInsert().Model(&events).Exec(context.Background())
	require.NoError(t, err)
	return events
}

func (b *clusterBundle) pending(t testing.TB) int64 {
	t.Helper()
	return outboxtest.CountUndelivered(t, b.db, "")
}

// runRelay runs a relay on the cluster until the test ends.
func (b *clusterBundle) runRelay(t *testing.T) {
	t.Helper()
	r, err := relay.New(b.db, b.opt, relay.Config{PollInterval: 20 * time.Millisecond, RoundBackoff: 10 * time.Millisecond,
		RoundBackoffMax: 200 * time.Millisecond, RetryBackoff: 50 * time.Millisecond, RetryBackoffMax: 200 * time.Millisecond,
		MaxAttempts: 1000, EnqueueTimeout: time.Second, DisableNotify: true, Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, r.Close())
	})
}

// On a 3-node Redis Cluster: events in queues spread over the nodes reach Redis through the relay's
// pipelined client, one node losing its data is found by the reconciler (for that node's queues only)
// and re-delivered, a task deleted by hand is found by a sweep, a node restarted holds up delivery only
// for its own queues until it is back, and an asynq server over the cluster handles every event exactly
// once.
func TestCluster(t *testing.T) {
	t.Parallel()
	b := setupCluster(t, &outboxtest.RedisOptions{NoPersistence: true})
	ctx := context.Background()
	nodes := map[int]bool{}
	for _, q := range b.queues {
		nodes[b.nodeOf[q]] = true
	}
	require.Len(t, nodes, 3, "the queues are spread over the three nodes")

	events := b.insert(t, 40)
	b.runRelay(t)
	outboxtest.WaitFor(t, 60*time.Second, "every row published", func() bool { return b.pending(t) == 0 })
	// Each queue's tasks are on its node: asked without redirection, that node has the task key.
	for _, ev := range events {
		key := "asynq:{" + ev.Queue + "}:t:" + ev.EventID.String()
		require.Equal(t, "1", b.cluster.Nodes[b.nodeOf[ev.Queue]].Cmd(t, "exists", key), "task %s on its node", key)
	}

	rc, err := relay.NewReconciler(b.db, b.opt, relay.ReconcilerConfig{BatchSize: 50, Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close() })
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.True(t, res.Swept)
	require.Equal(t, len(events), res.Checked)
	require.Zero(t, res.Missing)

	// Node 0 loses its data (the test's stand-in for a restart without persistence or a failover to an
	// empty replica): the reconciler finds the lost markers of its two queues, sweeps them and requeues
	// their rows.
	lostNode := 0
	b.cluster.Nodes[lostNode].Cmd(t, "flushall")
	var lostQueues []string
	for _, q := range b.queues {
		if b.nodeOf[q] == lostNode {
			lostQueues = append(lostQueues, q)
		}
	}
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, lostQueues, res.LostQueues)
	require.Equal(t, 2*40, res.Missing)
	require.Equal(t, 2*40, res.Requeued)
	outboxtest.WaitFor(t, 60*time.Second, "the requeued rows published again", func() bool { return b.pending(t) == 0 })

	// A task deleted by hand on another node: a sweep finds it.
	ins := asynq.NewInspector(b.opt)
	t.Cleanup(func() { _ = ins.Close() })
	victim := events[slices.IndexFunc(events, func(ev *model.Event) bool { return b.nodeOf[ev.Queue] != lostNode })]
	require.NoError(t, ins.DeleteTask(victim.Queue, victim.EventID.String()))
	res, err = rc.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, len(events), res.Checked)
	require.Equal(t, 1, res.Requeued)
	outboxtest.WaitFor(t, 60*time.Second, "the deleted task enqueued again", func() bool { return b.pending(t) == 0 })

	// Node 1 stops. New events for its queues wait (their enqueues fail and are released or retried),
	// the others are delivered meanwhile; once it is back, all are.
	down := 1
	b.cluster.Nodes[down].Stop(t)
	more := b.insert(t, 20)
	events = append(events, more...)
	outboxtest.WaitFor(t, 60*time.Second, "the events of the nodes still up published", func() bool {
		return outboxtest.CountUndelivered(t, b.db, "queue NOT IN (?)",
			bun.List(queuesOf(b, down))) == 0
	})
	require.EqualValues(t, 2*20, b.pending(t), "the events of the stopped node's queues wait")
	b.cluster.Nodes[down].Start(t) // empty: it ran without persistence
	b.cluster.WaitOK(t)
	outboxtest.WaitFor(t, 60*time.Second, "every row published", func() bool { return b.pending(t) == 0 })
	// What the restarted node lost (its queues' earlier tasks) the reconciler re-delivers.
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, queuesOf(b, down), res.LostQueues)
	require.Equal(t, 2*40, res.Requeued)
	outboxtest.WaitFor(t, 60*time.Second, "every row published", func() bool { return b.pending(t) == 0 })

	// An asynq server over the cluster handles every event exactly once.
	var mu sync.Mutex
	handled := map[string]int{}
	srv := asynq.NewServer(b.opt, asynq.Config{Queues: weights(b.queues), Concurrency: 8,
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		mu.Lock()
		defer mu.Unlock()
		handled[task.ResultWriter().TaskID()]++
		return nil
	})))
	t.Cleanup(srv.Shutdown)
	outboxtest.WaitFor(t, 60*time.Second, "every task completed", func() bool {
		n := 0
		for _, q := range b.queues {
			info, err := ins.GetQueueInfo(q)
			if err != nil {
				return false
			}
			n += info.Completed
		}
		return n == len(events)
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, handled, len(events))
	for _, ev := range events {
		require.Equal(t, 1, handled[ev.EventID.String()], "event %s handled once", ev.EventID)
	}
}

func queuesOf(b *clusterBundle, node int) []string {
	var qs []string
	for _, q := range b.queues {
		if b.nodeOf[q] == node {
			qs = append(qs, q)
		}
	}
	return slices.Clip(qs)
}

func weights(queues []string) map[string]int {
	m := map[string]int{}
	for _, q := range queues {
		m[q] = 1
	}
	return m
}

// The relay's pipelined client follows a queue whose hash slot moves to another node while it enqueues:
// ASK during the move, MOVED after it (its slot map is stale), TRYAGAIN for a script whose keys are
// split between the nodes for a moment. Every event reaches Redis once, on the new node.
func TestClusterSlotMigration(t *testing.T) {
	t.Parallel()
	b := setupCluster(t, nil)
	queue := b.queues[0]
	b.queues = []string{queue}
	to := (b.nodeOf[queue] + 1) % 3
	events := b.insert(t, 3000)
	b.runRelay(t)
	outboxtest.WaitFor(t, 60*time.Second, "the relay under way", func() bool { return b.pending(t) < 3000 })
	b.cluster.MigrateSlot(t, "{"+queue+"}", to)
	events = append(events, b.insert(t, 500)...) // enqueued with a slot map that says the old node
	outboxtest.WaitFor(t, 60*time.Second, "every row published", func() bool { return b.pending(t) == 0 })

	require.Equal(t, to, b.cluster.NodeOf(t, "{"+queue+"}"))
	ins := asynq.NewInspector(b.opt)
	t.Cleanup(func() { _ = ins.Close() })
	info, err := ins.GetQueueInfo(queue)
	require.NoError(t, err)
	require.Equal(t, len(events), info.Pending, "every event once")
	for _, ev := range events {
		key := "asynq:{" + queue + "}:t:" + ev.EventID.String()
		require.Equal(t, "1", b.cluster.Nodes[to].Cmd(t, "exists", key), "task %s on the new node", key)
	}
	require.Zero(t, outboxtest.Count(t, b.db, "outbox_events", "attempts > 0"), "no row was charged for the move")
}
