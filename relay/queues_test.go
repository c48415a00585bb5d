package relay

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

func TestQueuesConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		queues map[string]int
		want   string
	}{
		{"EmptyName", map[string]int{" ": 1}, "Queues must not name an empty queue"},
		{"ZeroWeight", map[string]int{"bulk": 0}, `Queues["bulk"] must be a weight between 1 and 1000000, got 0`},
		{"NegativeWeight", map[string]int{"bulk": -2}, `Queues["bulk"] must be a weight between 1 and 1000000, got -2`},
		{"HugeWeight", map[string]int{"bulk": 1_000_001}, `Queues["bulk"] must be a weight between 1 and 1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Config{Queues: tt.queues}.withDefaults().validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
	require.NoError(t, Config{Queues: map[string]int{"critical": 6, "default": 3, "bulk": 1}, StrictPriority: true}.withDefaults().validate())
	require.ErrorContains(t, Config{CancelCheckInterval: -time.Second}.withDefaults().validate(), "CancelCheckInterval must be positive")
}

func TestQueuesPlan(t *testing.T) {
	t.Parallel()
	shares := []queueShare{{queues: []string{"critical"}, weight: 6}, {queues: []string{"default"}, weight: 3},
		{queues: []string{"bulk"}, weight: 1}}
	fq := &fairQueues{}
	order, limits := fq.plan(100, shares)
	require.Equal(t, []int{0, 1, 2}, order)
	require.Equal(t, []int{60, 30, 10}, limits)

	// Too few rows for every share: each round starts with another share, in proportion to the weights.
	firsts := map[int]int{}
	for range 1000 {
		order, limits := fq.plan(1, shares)
		require.Equal(t, []int{1, 1, 1}, limits)
		firsts[order[0]]++
	}
	require.Equal(t, map[int]int{0: 600, 1: 300, 2: 100}, firsts)

	strict := &fairQueues{strict: true}
	order, limits = strict.plan(100, shares)
	require.Equal(t, []int{0, 1, 2}, order)
	require.Equal(t, []int{100, 100, 100}, limits)
}

// insertQueue commits n small events into queue with one statement.
func insertQueue(t testing.TB, b *testBundle, queue string, n int) {
	t.Helper()
	_, err := b.db.ExecContext(context.Background(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, metadata)
SELECT gen_random_uuid(), 'bulk.event', ?, '{"n":1}', '{}' FROM generate_series(1, ?)`, queue, n)
	require.NoError(t, err)
}

// claimCounts runs one round's claim of n rows with r, rolled back, and counts the rows per queue.
func claimCounts(t *testing.T, b *testBundle, r *Relay, n int) map[string]int {
	t.Helper()
	tx, err := b.db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	events, bad, err := r.rounds.rows.claimRound(context.Background(), tx, n)
	require.NoError(t, err)
	require.Empty(t, bad)
	counts := map[string]int{}
	for _, ev := range events {
		counts[ev.Queue]++
	}
	return counts
}

func TestQueuesClaimByWeight(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupPerRow(t)
	a, bq, rest1, rest2 := b.queue+"_a", b.queue+"_b", b.queue+"_c", b.queue+"_d"
	insertQueue(t, b, rest1, 5)
	insertQueue(t, b, a, 20)
	insertQueue(t, b, bq, 20)
	insertQueue(t, b, rest2, 5)
	queues := map[string]int{a: 3, bq: 1}

	t.Run("Weighted", func(t *testing.T) {
		// Shares of 8 by 3:1:1 (the rest): 4, 1, 1; the 2 left go to the first share that filled its own.
		r := b.newRelay(t, Config{Queues: queues, BatchSize: 8})
		require.Equal(t, map[string]int{a: 6, bq: 1, rest1: 1}, claimCounts(t, b, r, 8))
	})
	t.Run("Strict", func(t *testing.T) {
		r := b.newRelay(t, Config{Queues: queues, StrictPriority: true})
		require.Equal(t, map[string]int{a: 8}, claimCounts(t, b, r, 8))
		require.Equal(t, map[string]int{a: 20, bq: 20, rest1: 5, rest2: 3}, claimCounts(t, b, r, 48),
			"then b, then the rest in id order")
	})
	t.Run("UnusedShareGoesToOthers", func(t *testing.T) {
		r := b.newRelay(t, Config{Queues: map[string]int{a: 3, bq: 1, b.queue + "_empty": 100}})
		require.Equal(t, map[string]int{a: 20, bq: 20, rest1: 5, rest2: 5}, claimCounts(t, b, r, 100))
	})
	t.Run("RestIsFirstComeFirstServed", func(t *testing.T) {
		r := b.newRelay(t, Config{Queues: map[string]int{a: 1}, StrictPriority: true})
		require.Equal(t, map[string]int{a: 20, bq: 20, rest1: 5, rest2: 2}, claimCounts(t, b, r, 47),
			"bq and rest1 were committed before rest2")
	})
	t.Run("WithoutQueuesFIFO", func(t *testing.T) {
		r := b.newRelay(t, Config{})
		require.Equal(t, map[string]int{rest1: 5, a: 3}, claimCounts(t, b, r, 8))
	})
}

// TestQueuesKeepKeyedOrderAndByteBudget: keyed heads are claimed before the queues' shares, and the byte
// budget bounds a round claimed by queue.
func TestQueuesKeepKeyedOrderAndByteBudget(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupPerRow(t)
	critical, bulk := b.queue+"_critical", b.queue+"_bulk"
	insertQueue(t, b, bulk, 50)
	insertKeyed(t, b.db, bulk, "keyed", []keyedPayload{{Key: "k1", Seq: 0}, {Key: "k1", Seq: 1}, {Key: "k2", Seq: 0}})
	insertQueue(t, b, critical, 50)

	r := b.newRelay(t, Config{Queues: map[string]int{critical: 3, bulk: 1}})
	tx, err := b.db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	events, _, err := r.rounds.rows.claimRound(context.Background(), tx, 20)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	var keys []string
	counts := map[string]int{}
	for _, ev := range events {
		if ev.OrderingKey != "" {
			keys = append(keys, ev.OrderingKey)
			continue
		}
		counts[ev.Queue]++
	}
	require.Equal(t, []string{"k1", "k2"}, keys, "the heads only")
	require.Equal(t, map[string]int{critical: 14, bulk: 4}, counts, "18 rows by 3:1: 13 and 4, and the one left to critical")

	// Rows of 64 KiB within a budget of 1 MiB: about 16 rows, whatever the queues.
	_, err = b.db.ExecContext(context.Background(), `UPDATE outbox_events SET payload = jsonb_build_object('pad', repeat('x', 65536))`)
	require.NoError(t, err)
	r = b.newRelay(t, Config{Queues: map[string]int{critical: 3, bulk: 1}, BatchBytes: 1 << 20})
	for range 2 { // the first claim is windowed; the second too (its rows were large)
		tx, err := b.db.BeginTx(context.Background(), nil)
		require.NoError(t, err)
		var res BatchEvent
		events, _ := r.rounds.rows.read(context.Background(), tx, &res)
		require.NoError(t, res.Err)
		require.NoError(t, tx.Rollback())
		total := claimedBytes(events)
		require.LessOrEqual(t, total, int64(1<<20)+3*(65536+100), "over the budget by at most one row per share claimed")
		require.GreaterOrEqual(t, len(events), 10)
	}
}

// TestQueuesCriticalOvertakesBulkBacklog: a bulk backlog drains in rounds of 4,000 rows; critical events
// committed behind it one at a time are each enqueued before 2,000 more bulk events are (half a round:
// the lane, queues_lane.go, not the next round, takes them), and the latency from each commit to its
// enqueue's return is logged. The size is small for make test: QUEUES_LATENCY_BACKLOG=100000 and
// QUEUES_LATENCY_RUNS=20 run the full one (BenchmarkQueuesDrain measures it with the default Config).
func TestQueuesCriticalOvertakesBulkBacklog(t *testing.T) {
	cfg := Config{DisableNotify: true}
	if outboxtest.Pooled() {
		// Behind the pooler the lane's look waits in PgBouncer's queue for one of the pool's two server
		// connections, which a worker's round holds for the whole round (a look waited 825 ms while every
		// test shared the pool). docs/connecting.md sizes the pool at Workers + 2; the test pool is 2, so here the
		// test runs alone (not in parallel) with one worker and no reconciler: a connection for the round,
		// one for the lane, and the same bound.
		cfg.Workers, cfg.DisableReconciler = 1, true
	} else {
		t.Parallel()
	}
	outboxtest.SkipShort(t)
	b := setupPerRow(t)
	critical, bulk := b.queue+"_critical", b.queue+"_bulk"
	t.Cleanup(func() {
		_ = b.inspector.DeleteQueue(critical, true)
		_ = b.inspector.DeleteQueue(bulk, true)
	})
	backlog, runs := queuesEnvInt(t, "QUEUES_LATENCY_BACKLOG", 20_000), queuesEnvInt(t, "QUEUES_LATENCY_RUNS", 3)
	const batch, spacing = 4000, 1500
	require.Greater(t, backlog, (runs+1)*spacing+batch, "QUEUES_LATENCY_BACKLOG: the backlog must outlast the runs")
	insertQueue(t, b, bulk, backlog)
	_, err := b.db.ExecContext(context.Background(), "ANALYZE outbox_events")
	require.NoError(t, err)

	enq := &queueEnqueuer{Enqueuer: b.enq, watch: critical}
	cfg.Queues, cfg.BatchSize, cfg.Enqueuer = map[string]int{critical: 6, "default": 3, bulk: 1}, batch, enq
	r := b.newRelay(t, cfg)
	res := measureCritical(t, b.db, r, enq, critical, runs, spacing, 0)
	for i, lat := range res.latencies {
		t.Logf("critical event %d: enqueued %s after its commit, %d bulk events enqueued meanwhile", i, lat, res.between[i])
		require.Less(t, res.between[i], int64(batch/2), "critical event %d: enqueued before half a bulk round more", i)
	}
	t.Logf("commit to enqueue of %d critical events behind a %d-event bulk backlog (BatchSize %d): %s",
		runs, backlog, batch, res.summary())
}

// queuesEnvInt reads a positive int from the environment, def when unset.
func queuesEnvInt(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

// queueEnqueuer wraps an Enqueuer: it counts the tasks of every queue but watch that reached Redis, and
// notes when each task of watch did, with that count then.
type queueEnqueuer struct {
	Enqueuer
	watch string

	others    atomic.Int64
	lastOther atomic.Int64 // unix nanoseconds of the last one
	mu        sync.Mutex
	at        map[string]queueEnqueued // by task id
}

type queueEnqueued struct {
	at     time.Time
	others int64
}

func (e *queueEnqueuer) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	info, err := e.Enqueuer.EnqueueContext(ctx, task, opts...)
	if err != nil {
		return info, err
	}
	if info.Queue != e.watch {
		e.others.Add(1)
		e.lastOther.Store(time.Now().UnixNano())
		return info, nil
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at == nil {
		e.at = map[string]queueEnqueued{}
	}
	if _, ok := e.at[info.ID]; !ok {
		e.at[info.ID] = queueEnqueued{at: now, others: e.others.Load()}
	}
	return info, nil
}

func (e *queueEnqueuer) enqueued(id string) (queueEnqueued, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q, ok := e.at[id]
	return q, ok
}

// criticalRun is what measureCritical found.
type criticalRun struct {
	latencies []time.Duration // from each critical event's commit to its enqueue's return
	between   []int64         // the other queues' tasks enqueued meanwhile
	drained   time.Duration   // from Run to the drain's last task, when asked for
}

func (c criticalRun) summary() string {
	s := slices.Sorted(slices.Values(c.latencies))
	if len(s) == 0 {
		return "no events"
	}
	pct := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %s, p99 %s, max %s (%d events)", pct(0.5).Round(100*time.Microsecond),
		pct(0.99).Round(100*time.Microsecond), s[len(s)-1].Round(100*time.Microsecond), len(s))
}

// measureCritical runs r (whose Enqueuer is enq) over a backlog in other queues than critical, commits
// runs critical events, each once spacing more of the backlog's tasks reached Redis (without waiting for
// the one before), and measures each one's latency. With drain > 0 it also waits for drain tasks of the
// backlog and times them from Run.
func measureCritical(tb testing.TB, db *bun.DB, r *Relay, enq *queueEnqueuer, critical string, runs, spacing, drain int) criticalRun {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	}()
	type commit struct {
		id     string
		at     time.Time
		others int64
	}
	var commits []commit
	for i := range runs {
		outboxtest.WaitFor(tb, 10*time.Minute, "the backlog's drain under way", func() bool {
			return enq.others.Load() >= int64(spacing*(i+1))
		})
		ev, err := model.NewEvent("payment.failed", map[string]int{"n": i}, model.WithQueue(critical))
		require.NoError(tb, err)
		_, err = db.NewInsert().Model(ev).Exec(context.Background())
		require.NoError(tb, err)
		commits = append(commits, commit{id: ev.EventID.String(), at: time.Now(), others: enq.others.Load()})
	}
	var res criticalRun
	for _, c := range commits {
		var got queueEnqueued
		outboxtest.WaitFor(tb, 10*time.Minute, "the critical event enqueued", func() bool {
			var ok bool
			got, ok = enq.enqueued(c.id)
			return ok
		})
		res.latencies = append(res.latencies, got.at.Sub(c.at))
		res.between = append(res.between, got.others-c.others)
	}
	if drain > 0 {
		outboxtest.WaitFor(tb, 10*time.Minute, "the backlog drained", func() bool { return enq.others.Load() >= int64(drain) })
		res.drained = time.Unix(0, enq.lastOther.Load()).Sub(start)
	}
	return res
}

// TestQueuesClaimReadsTheQueueIndex: the claim of a queue with no backlog, next to a large backlog in
// another queue that the statistics know as the only one, walks outbox_events_queue_claim_idx, not the
// other queue's pending rows. (With `queue = q.name`, PostgreSQL took the queue of the lateral claim for
// the one it knew, chose outbox_events_unkeyed_pending_idx and filtered the whole backlog in every round.)
func TestQueuesClaimReadsTheQueueIndex(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupPerRow(t)
	critical, bulk := b.queue+"_critical", b.queue+"_bulk"
	insertQueue(t, b, bulk, 20_000)
	ctx := context.Background()
	_, err := b.db.ExecContext(ctx, "ANALYZE outbox_events")
	require.NoError(t, err)
	insertQueue(t, b, critical, 1)
	for _, q := range [][]string{{critical}, {bulk}, {critical, bulk}} {
		var plan string
		require.NoError(t, b.db.NewRaw("EXPLAIN (FORMAT JSON) "+store.QueueClaimSizedSQL, pgdialect.Array(q), 0, 428, 428).Scan(ctx, &plan))
		var indexes []string
		for _, m := range regexp.MustCompile(`"Index Name": "([^"]+)"`).FindAllStringSubmatch(plan, -1) {
			indexes = append(indexes, m[1])
		}
		require.Equal(t, []string{"outbox_events_queue_claim_idx"}, indexes, "the indexes the claim of %v reads", q)
	}
}

// TestQueuesLaneServesQuietQueues: the lane serves the named queues whose last claim left nothing behind,
// only while some share (the rest too) left rows behind; with StrictPriority only those above every
// queue with a backlog. It wakes when the workers turn busy.
func TestQueuesLaneServesQuietQueues(t *testing.T) {
	t.Parallel()
	newFQ := func(strict bool) *fairQueues {
		return newFairQueues(Config{Queues: map[string]int{"critical": 6, "default": 3, "bulk": 1}, StrictPriority: strict})
	}
	rest := queueShare{queues: []string{"other1", "other2"}, weight: 1}
	tests := []struct {
		name          string
		strict        bool
		rest          bool
		reached, full []bool // critical, default, bulk[, rest]
		want          []string
		busy          bool
	}{
		{"NoBacklog", false, false, []bool{true, true, true}, []bool{false, false, false}, []string{}, false},
		{"BulkBacklog", false, false, []bool{true, true, true}, []bool{false, false, true}, []string{"critical", "default"}, true},
		{"CriticalBacklog", false, false, []bool{true, true, true}, []bool{true, false, false}, []string{"default", "bulk"}, true},
		{"RestBacklog", false, true, []bool{true, true, true, true}, []bool{false, false, false, true}, []string{"critical", "default", "bulk"}, true},
		{"StrictDefaultBacklog", true, false, []bool{true, true, true}, []bool{false, true, false}, []string{"critical"}, true},
		{"StrictCriticalBacklog", true, false, []bool{true, false, false}, []bool{true, false, false}, []string{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fq := newFQ(tt.strict)
			shares := fq.named
			if tt.rest {
				shares = append(slices.Clip(shares), rest)
			}
			fq.lane.note(fq, shares, tt.reached, tt.full)
			queues, busy := fq.lane.serve()
			require.Equal(t, tt.busy, busy)
			require.Equal(t, tt.want, append([]string{}, queues...))
			select {
			case <-fq.lane.kick:
				require.True(t, tt.busy, "kicked")
			default:
				require.False(t, tt.busy, "kicked")
			}
		})
	}

	// A share the claim did not reach keeps what the last claim that reached it found.
	fq := newFQ(false)
	fq.lane.note(fq, fq.named, []bool{true, true, true}, []bool{false, false, true})
	fq.lane.note(fq, fq.named, []bool{true, false, false}, []bool{true, false, false})
	queues, busy := fq.lane.serve()
	require.True(t, busy)
	require.Equal(t, []string{"default"}, queues, "critical now, and bulk still, have a backlog")
}
