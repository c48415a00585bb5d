package relay

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/outboxtest"
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

func TestQueuesFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOX_QUEUES": "critical:6, default:3,bulk:1,", "OUTBOX_STRICT_PRIORITY": "true",
		"OUTBOX_CANCEL_CHECK_INTERVAL": "250ms"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := configFromLookup(lookup)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"critical": 6, "default": 3, "bulk": 1}, c.Queues)
	require.True(t, c.StrictPriority)
	require.Equal(t, 250*time.Millisecond, c.CancelCheckInterval)

	for k, v := range map[string]string{"OUTBOX_QUEUES": "critical=6", "OUTBOX_STRICT_PRIORITY": "maybe",
		"OUTBOX_CANCEL_CHECK_INTERVAL": "soon"} {
		_, err := configFromLookup(func(name string) (string, bool) { return v, name == k })
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.ErrorContains(t, err, k)
	}
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
	events, bad, err := r.claimRound(context.Background(), tx, n)
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
	b := setup(t)
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
	b := setup(t)
	critical, bulk := b.queue+"_critical", b.queue+"_bulk"
	insertQueue(t, b, bulk, 50)
	insertKeyed(t, b.db, bulk, "keyed", []keyedPayload{{Key: "k1", Seq: 0}, {Key: "k1", Seq: 1}, {Key: "k2", Seq: 0}})
	insertQueue(t, b, critical, 50)

	r := b.newRelay(t, Config{Queues: map[string]int{critical: 3, bulk: 1}})
	tx, err := b.db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	events, _, err := r.claimRound(context.Background(), tx, 20)
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
		events, _ := r.claimBatch(context.Background(), tx, &res)
		require.NoError(t, res.Err)
		require.NoError(t, tx.Rollback())
		total := claimedBytes(events)
		require.LessOrEqual(t, total, int64(1<<20)+3*(65536+100), "over the budget by at most one row per share claimed")
		require.GreaterOrEqual(t, len(events), 10)
	}
}

// TestQueuesCriticalOvertakesBulkBacklog: 100,000 bulk events drain; a critical event committed behind
// them is published at once, not after the drain. The latency from its commit to its enqueue is logged
// (QUEUES_LATENCY_RUNS=n repeats it).
func TestQueuesCriticalOvertakesBulkBacklog(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setup(t)
	critical, bulk := b.queue+"_critical", b.queue+"_bulk"
	t.Cleanup(func() {
		_ = b.inspector.DeleteQueue(critical, true)
		_ = b.inspector.DeleteQueue(bulk, true)
	})
	const backlog = 100_000
	insertQueue(t, b, bulk, backlog)
	_, err := b.db.ExecContext(context.Background(), "ANALYZE outbox_events")
	require.NoError(t, err)

	var mu sync.Mutex
	enqueuedAt := map[string]time.Time{}
	b.enq.setFail(func(id string) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := enqueuedAt[id]; !ok {
			enqueuedAt[id] = time.Now()
		}
		return nil
	})
	runs, batch := 3, 0
	if s := os.Getenv("QUEUES_LATENCY_RUNS"); s != "" {
		runs, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	if s := os.Getenv("QUEUES_LATENCY_BATCH"); s != "" {
		batch, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	r := b.newRelay(t, Config{Queues: map[string]int{critical: 6, "default": 3, bulk: 1}, DisableNotify: true, BatchSize: batch})
	run(t, r)
	var worst time.Duration
	for i := range runs {
		outboxtest.WaitFor(t, 2*time.Minute, "the bulk drain under way", func() bool {
			return published(t, b.db) >= int64(2000*(i+1))
		})
		ev, err := model.NewEvent("payment.failed", map[string]int{"n": i}, model.WithQueue(critical))
		require.NoError(t, err)
		_, err = b.db.NewInsert().Model(ev).Exec(context.Background())
		require.NoError(t, err)
		committed := time.Now()
		var at time.Time
		outboxtest.WaitFor(t, time.Minute, "the critical event enqueued", func() bool {
			mu.Lock()
			defer mu.Unlock()
			var ok bool
			at, ok = enqueuedAt[ev.EventID.String()]
			return ok
		})
		latency := at.Sub(committed)
		bulkDone := published(t, b.db)
		t.Logf("critical event %d: enqueued %s after its commit, with %d of %d bulk events published",
			i, latency, bulkDone, backlog)
		require.Less(t, bulkDone, int64(backlog/2), "published before half the bulk backlog drained")
		worst = max(worst, latency)
	}
	t.Logf("worst commit-to-enqueue latency of a critical event behind a %d-event bulk backlog: %s", backlog, worst)
}

// TestQueuesClaimReadsTheQueueIndex: the claim of a queue with no backlog, next to a large backlog in
// another queue that the statistics know as the only one, walks outbox_events_queue_claim_idx, not the
// other queue's pending rows. (With `queue = q.name`, PostgreSQL took the queue of the lateral claim for
// the one it knew, chose outbox_events_unkeyed_pending_idx and filtered the whole backlog in every round.)
func TestQueuesClaimReadsTheQueueIndex(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setup(t)
	critical, bulk := b.queue+"_critical", b.queue+"_bulk"
	insertQueue(t, b, bulk, 20_000)
	ctx := context.Background()
	_, err := b.db.ExecContext(ctx, "ANALYZE outbox_events")
	require.NoError(t, err)
	insertQueue(t, b, critical, 1)
	for _, q := range [][]string{{critical}, {bulk}, {critical, bulk}} {
		var plan string
		require.NoError(t, b.db.NewRaw("EXPLAIN (FORMAT JSON) "+queueClaimSizedSQL, pgdialect.Array(q), 0, 428, 428).Scan(ctx, &plan))
		var indexes []string
		for _, m := range regexp.MustCompile(`"Index Name": "([^"]+)"`).FindAllStringSubmatch(plan, -1) {
			indexes = append(indexes, m[1])
		}
		require.Equal(t, []string{"outbox_events_queue_claim_idx"}, indexes, "the indexes the claim of %v reads", q)
	}
}
