package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/maintenance/keytrack"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// keyedPayload is the payload of the ordering tests' events: its key and its place in the key's sequence.
type keyedPayload struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// insertKeyed commits, in one transaction, one event per (key, seq) in the given order.
func insertKeyed(t testing.TB, db bun.IDB, queue, name string, items []keyedPayload) []*model.Event {
	t.Helper()
	events := make([]*model.Event, 0, len(items))
	for _, it := range items {
		var opts []model.Option
		opts = append(opts, model.WithQueue(queue))
		if it.Key != "" {
			opts = append(opts, model.WithOrderingKey(it.Key))
		}
		ev, err := model.NewEvent(name, it, opts...)
		require.NoError(t, err)
		events = append(events, ev)
	}
	_, err := db.NewInsert().Model(&events).Exec(context.Background())
	require.NoError(t, err)
	return events
}

// sequenceRecorder is a handler's ledger: for each sequence (a key, or a key and listener) the runs in
// flight and the last sequence number that succeeded. It records every violation of the ordering
// guarantee: a run that starts while another run of its sequence is in flight, or whose number is not
// the one after the last success.
type sequenceRecorder struct {
	mu         sync.Mutex
	active     map[string]int
	done       map[string][]int // successes, in the order they happened
	violations []string
	runs       int
	failures   int
	starts     map[string]time.Time // when the handler of (sequence, number) first started
	ends       map[string]time.Time // when it succeeded
}

func newSequenceRecorder() *sequenceRecorder {
	return &sequenceRecorder{active: map[string]int{}, done: map[string][]int{}, starts: map[string]time.Time{}, ends: map[string]time.Time{}}
}

func (s *sequenceRecorder) start(seq string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs++
	if s.active[seq] > 0 {
		s.violations = append(s.violations, fmt.Sprintf("%s: #%d started while another run was in flight", seq, n))
	}
	s.active[seq]++
	next := len(s.done[seq])
	if n != next {
		s.violations = append(s.violations, fmt.Sprintf("%s: #%d started, but #%d is the next one", seq, n, next))
	}
	k := fmt.Sprint(seq, "#", n)
	if _, ok := s.starts[k]; !ok {
		s.starts[k] = time.Now()
	}
}

func (s *sequenceRecorder) end(seq string, n int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active[seq]--
	if !ok {
		s.failures++
		return
	}
	s.done[seq] = append(s.done[seq], n)
	s.ends[fmt.Sprint(seq, "#", n)] = time.Now()
}

func (s *sequenceRecorder) completed(seq string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.done[seq])
}

// requireInOrder checks that nothing was violated and that each sequence completed 0..n-1 once, in order.
func (s *sequenceRecorder) requireInOrder(t *testing.T, want map[string]int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Empty(t, s.violations)
	for seq, n := range want {
		got := s.done[seq]
		require.Len(t, got, n, "successes of %s", seq)
		for i, v := range got {
			require.Equal(t, i, v, "%s: success #%d", seq, i)
		}
	}
}

// handoffDelays returns, for each (sequence, n > 0), the time from n-1's success to n's first start.
func (s *sequenceRecorder) handoffDelays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ds []time.Duration
	for seq, done := range s.done {
		for n := 1; n < len(done); n++ {
			end, ok1 := s.ends[fmt.Sprint(seq, "#", n-1)]
			start, ok2 := s.starts[fmt.Sprint(seq, "#", n)]
			if ok1 && ok2 {
				ds = append(ds, start.Sub(end))
			}
		}
	}
	return ds
}

// startWorker runs an asynq server on the bundle's queue with concurrency workers and quick retries.
func (b *testBundle) startWorker(t *testing.T, concurrency int, h asynq.Handler) {
	t.Helper()
	srv := asynq.NewServer(b.redis, asynq.Config{
		Queues:                   map[string]int{b.queue: 1},
		Concurrency:              concurrency,
		TaskCheckInterval:        5 * time.Millisecond,
		DelayedTaskCheckInterval: 10 * time.Millisecond, // asynq moves retries back to pending this often (default 5s)
		RetryDelayFunc:           func(int, error, *asynq.Task) time.Duration { return 5 * time.Millisecond },
		Logger:                   quietAsynqLogger{},
		LogLevel:                 asynq.FatalLevel,
	})
	require.NoError(t, srv.Start(h))
	t.Cleanup(srv.Shutdown)
}

// recordingHandler is a plain asynq handler that records its runs in rec under the key (and listener)
// of the task, works for a moment, and fails an attempt when fail says so.
func recordingHandler(rec *sequenceRecorder, fail func(p keyedPayload, retried int) bool) asynq.HandlerFunc {
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	return func(ctx context.Context, task *asynq.Task) error {
		var p keyedPayload
		if err := json.Unmarshal(task.Payload(), &p); err != nil {
			return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
		}
		seq := p.Key
		if l := task.Headers()[wire.HeaderListener]; l != "" {
			seq += "/" + l
		}
		if seq == "" {
			return nil // unkeyed
		}
		if got := task.Headers()[wire.HeaderOrderingKey]; got != p.Key {
			return fmt.Errorf("%w: header %s = %q, want %q", asynq.SkipRetry, wire.HeaderOrderingKey, got, p.Key)
		}
		retried, _ := asynq.GetRetryCount(ctx)
		rec.start(seq, p.Seq)
		rngMu.Lock()
		work := time.Duration(rng.IntN(2000)) * time.Microsecond
		rngMu.Unlock()
		time.Sleep(work) // the handler's work, so that a second run of the key would overlap it
		ok := fail == nil || !fail(p, retried)
		rec.end(seq, p.Seq, ok)
		if !ok {
			return errors.New("injected handler failure")
		}
		return nil
	}
}

// TestOrderingKeys: several keys, interleaved with unkeyed events, two relays with small batches and a
// worker of concurrency 8 whose handler fails a third of the first attempts; asynq retries them. No key
// ever runs twice at once or out of order, and every event is handled.
func TestOrderingKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const keys, perKey = 6, 25
	var items []keyedPayload
	for n := range perKey {
		for k := range keys {
			items = append(items, keyedPayload{Key: fmt.Sprintf("account-%d", k), Seq: n})
			if k%2 == 0 {
				items = append(items, keyedPayload{Seq: n}) // unkeyed
			}
		}
	}
	// Several transactions, each after the previous committed: the id order is the commit order.
	for part := range chunks(items, 40) {
		insertKeyed(t, b.db, b.queue, "account.changed", part)
	}

	rec := newSequenceRecorder()
	b.startWorker(t, 8, recordingHandler(rec, func(p keyedPayload, retried int) bool {
		return retried == 0 && (p.Seq+len(p.Key))%3 == 0
	}))
	for range 2 {
		run(t, b.newRelay(t, Config{BatchSize: 7, Workers: 2}))
	}
	want := map[string]int{}
	for k := range keys {
		want[fmt.Sprintf("account-%d", k)] = perKey
	}
	outboxtest.WaitFor(t, 60*time.Second, "every keyed event completed", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "ordering_key IS NOT NULL AND completed_at IS NULL") == 0
	})
	rec.requireInOrder(t, want)
	require.Zero(t, outboxtest.CountUndelivered(t, b.db, ""), "unkeyed rows published too")
	rec.mu.Lock()
	t.Logf("%d handler runs, %d failed and retried by asynq", rec.runs, rec.failures)
	require.Positive(t, rec.failures, "some attempts failed")
	rec.mu.Unlock()
}

// TestOrderingUnkeyedFlowWhileKeyBlocked: a key whose head is dead holds its followers back, and nothing
// else: unkeyed events and other keys flow. admin.BlockedKeys and admin.ReadBacklog show the key; admin.RetryDead frees it.
func TestOrderingUnkeyedFlowWhileKeyBlocked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	blocked := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"stuck", 0}, {"stuck", 1}, {"stuck", 2}})
	poison := blocked[0].EventID.String()
	b.enq.setFail(func(id string) error {
		if id == poison {
			return fmt.Errorf("%w: injected: enqueue refused", ErrTaskRejected)
		}
		return nil
	})
	r := b.newRelay(t, Config{MaxAttempts: 1})
	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Dead, "the head of the key died")

	others := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"free", 0}, {"", 0}, {"free", 1}, {"", 1}})
	rec := newSequenceRecorder()
	b.startWorker(t, 4, recordingHandler(rec, nil))
	stop := run(t, r)
	outboxtest.WaitFor(t, 30*time.Second, "the other key and the unkeyed events done", func() bool {
		return rec.completed("free") == 2 &&
			outboxtest.CountDelivered(t, b.db, "ordering_key IS NULL") == 2
	})
	require.Zero(t, rec.completed("stuck"))
	require.Zero(t, b.enq.count(blocked[1].EventID.String()), "the blocked key's followers were never enqueued")

	keys, err := adminOf(t, b.db).BlockedKeys(ctx, 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "stuck", keys[0].Key)
	require.Equal(t, blocked[0].EventID, keys[0].EventID)
	require.EqualValues(t, 2, keys[0].Waiting)
	require.Contains(t, keys[0].LastError, "injected: enqueue refused")
	bl, err := adminOf(t, b.db).ReadBacklog(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, bl.BlockedKeys)
	_ = others

	b.enq.setFail(nil)
	n, err := adminOf(t, b.db).RetryDead(ctx, blocked[0].EventID)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	outboxtest.WaitFor(t, 30*time.Second, "the unblocked key drained", func() bool { return rec.completed("stuck") == 3 })
	stop()
	rec.requireInOrder(t, map[string]int{"stuck": 3, "free": 2})
	keys, err = adminOf(t, b.db).BlockedKeys(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, keys)
}

// TestOrderingArchivedBlocksAndRetryRuns: a handler that gives up (SkipRetry) gets its task archived; the
// relay marks the event dead, the key blocks, and `dead retry` runs a fresh task after which the key moves on.
func TestOrderingArchivedBlocksAndRetryRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	events := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"k", 0}, {"k", 1}})

	rec := newSequenceRecorder()
	var mu sync.Mutex
	refuse := true
	h := recordingHandler(rec, nil)
	b.startWorker(t, 4, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		mu.Lock()
		r := refuse
		mu.Unlock()
		if r && task.ResultWriter().TaskID() == events[0].EventID.String() {
			return fmt.Errorf("account unknown: %w", asynq.SkipRetry)
		}
		return h(ctx, task)
	}))
	var dead []DeadEvent
	var deadMu sync.Mutex
	// Config.Inspector: the tracker looks every task up with it, rather than reading the states from Redis.
	run(t, b.newRelay(t, Config{Inspector: b.inspector, Observer: Observer{OnDead: func(_ context.Context, ev DeadEvent) {
		deadMu.Lock()
		defer deadMu.Unlock()
		dead = append(dead, ev)
	}}}))
	outboxtest.WaitFor(t, 30*time.Second, "the archived event marked dead", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "dead_at IS NOT NULL") == 1
	})
	var row model.Event
	require.NoError(t, b.db.NewSelect().Model(&row).Where("event_id = ?", events[0].EventID).Scan(ctx))
	require.Contains(t, row.LastError, "asynq archived task "+events[0].EventID.String())
	require.Contains(t, row.LastError, "account unknown")
	// OnDead is called after the tracker's commit, so it may trail the row. Never assert while holding
	// deadMu: a failed assertion would leave the hook, and so the relay's stop, waiting on it.
	deadCount := func() int {
		deadMu.Lock()
		defer deadMu.Unlock()
		return len(dead)
	}
	outboxtest.WaitFor(t, 10*time.Second, "OnDead called for the archived event", func() bool { return deadCount() >= 1 })
	require.Equal(t, 1, deadCount())
	keys, err := adminOf(t, b.db).BlockedKeys(ctx, 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	_, err = b.inspector.GetTaskInfo(b.queue, events[1].EventID.String())
	require.ErrorIs(t, err, asynq.ErrTaskNotFound, "the event behind the archived one was not handed to asynq")

	mu.Lock()
	refuse = false
	mu.Unlock()
	n, err := adminOf(t, b.db).RetryDead(ctx, events[0].EventID)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	outboxtest.WaitFor(t, 30*time.Second, "both events handled", func() bool { return rec.completed("k") == 2 })
	rec.requireInOrder(t, map[string]int{"k": 2})
	outboxtest.WaitFor(t, 10*time.Second, "both rows completed", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "completed_at IS NOT NULL") == 2
	})
}

// TestOrderingFanOut: with Routes, each listener's tasks of a key run in order and one at a time, and
// event n+1 reaches no listener before every listener's task of event n completed.
func TestOrderingFanOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	routes := fanout.Routes{"account.changed": {"ledger", "mail"}}
	const keys, perKey = 3, 10
	var items []keyedPayload
	for n := range perKey {
		for k := range keys {
			items = append(items, keyedPayload{Key: fmt.Sprintf("a%d", k), Seq: n})
		}
	}
	insertKeyed(t, b.db, b.queue, "account.changed", items)

	rec := newSequenceRecorder()   // per key and listener
	byKey := newSequenceRecorder() // per key: starts of n+1 must follow both listeners' success of n
	var mu sync.Mutex
	doneListeners := map[string]int{} // key#n -> listeners that succeeded
	h := recordingHandler(rec, func(p keyedPayload, retried int) bool { return retried == 0 && p.Seq%4 == 1 })
	mux := asynq.NewServeMux()
	for _, l := range routes["account.changed"] {
		routes.Handle(mux, "account.changed", l, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			var p keyedPayload
			require.NoError(t, json.Unmarshal(task.Payload(), &p))
			mu.Lock()
			if p.Seq > 0 && doneListeners[fmt.Sprint(p.Key, "#", p.Seq-1)] < 2 {
				byKey.violations = append(byKey.violations, fmt.Sprintf("%s #%d (%s) started before #%d completed for every listener", p.Key, p.Seq, l, p.Seq-1))
			}
			mu.Unlock()
			err := h(ctx, task)
			if err == nil {
				mu.Lock()
				doneListeners[fmt.Sprint(p.Key, "#", p.Seq)]++
				mu.Unlock()
			}
			return err
		}))
	}
	b.startWorker(t, 6, mux)
	run(t, b.newRelay(t, Config{Routes: routes, BatchSize: 5}))
	outboxtest.WaitFor(t, 60*time.Second, "every keyed event completed", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "completed_at IS NULL") == 0
	})
	want := map[string]int{}
	for k := range keys {
		for _, l := range routes["account.changed"] {
			want[fmt.Sprintf("a%d/%s", k, l)] = perKey
		}
	}
	rec.requireInOrder(t, want)
	require.Empty(t, byKey.violations)
}

// TestOrderingMissingTaskEnqueuedAgain: a keyed event whose task Redis lost (deleted here) is enqueued
// again by the tracker, and its key moves on once the new task completed.
func TestOrderingMissingTaskEnqueuedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	events := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"k", 0}, {"k", 1}})
	r := b.newRelay(t, Config{})
	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Published, "only the head of the key")
	require.NoError(t, b.inspector.DeleteTask(b.queue, events[0].EventID.String()))

	tr, err := r.keys.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, keytrack.Result{InFlight: 1, Requeued: 1}, tr)
	res = r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Published, "the lost head again, not its follower")
	require.Equal(t, 2, b.enq.count(events[0].EventID.String()))
	require.Zero(t, b.enq.count(events[1].EventID.String()))

	rec := newSequenceRecorder()
	b.startWorker(t, 2, recordingHandler(rec, nil))
	run(t, r)
	outboxtest.WaitFor(t, 30*time.Second, "both handled", func() bool { return rec.completed("k") == 2 })
	rec.requireInOrder(t, map[string]int{"k": 2})
}

func TestTaskCarriesOrderingKey(t *testing.T) {
	t.Parallel()
	ev, err := model.NewEvent("account.changed", nil, model.WithOrderingKey("account:42"))
	require.NoError(t, err)
	task, _ := newTask(ev, ev.EventID.String(), time.Hour)
	require.Equal(t, "account:42", task.Headers()[wire.HeaderOrderingKey])
	ev, err = model.NewEvent("account.changed", nil)
	require.NoError(t, err)
	task, _ = newTask(ev, ev.EventID.String(), time.Hour)
	require.NotContains(t, task.Headers(), wire.HeaderOrderingKey)
}

func TestKeyCheckIntervalConfig(t *testing.T) {
	t.Parallel()
	require.Equal(t, keyCheckIntervalDefault, Config{}.withDefaults().KeyCheckInterval)
	err := Config{KeyCheckInterval: -time.Millisecond}.withDefaults().validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "KeyCheckInterval must be positive")
}

// TestOrderingCleanupKeepsUnfinishedKeyedRows: the cleanup deletes a keyed row past PublishedRetention only once
// it completed; an unfinished one holds its key, and deleting it would release the next event.
func TestOrderingCleanupKeepsUnfinishedKeyedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"done", 0}, {"inflight", 0}, {"inflight", 1}, {"", 0}})
	_, err := b.db.ExecContext(ctx, `UPDATE outbox_events SET published_at = now() - interval '2 hours'
WHERE ordering_key = 'done' OR ordering_key IS NULL OR id = (SELECT min(id) FROM outbox_events WHERE ordering_key = 'inflight')`)
	require.NoError(t, err)
	_, err = b.db.ExecContext(ctx, `UPDATE outbox_events SET completed_at = now() WHERE ordering_key = 'done'`)
	require.NoError(t, err)
	n, err := b.newRelay(t, Config{PublishedRetention: time.Hour}).cleaner.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the completed keyed row and the unkeyed one")
	require.EqualValues(t, 2, outboxtest.Count(t, b.db, "outbox_events", "ordering_key = 'inflight'"))
}

// TestOrderingEnqueuedBeforeACrash: a relay that enqueued a key's head and died before it committed
// left the task in Redis and the row pending; the next claim finds the task (a TaskID conflict), takes
// it for delivered, and the event runs once.
func TestOrderingEnqueuedBeforeACrash(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	events := insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"k", 0}, {"k", 1}})
	task, opts := newTask(events[0], events[0].EventID.String(), time.Hour)
	_, err := b.enq.client.EnqueueContext(ctx, task, opts...)
	require.NoError(t, err)

	r := b.newRelay(t, Config{})
	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.Published)
	rec := newSequenceRecorder()
	b.startWorker(t, 2, recordingHandler(rec, nil))
	run(t, r)
	outboxtest.WaitFor(t, 30*time.Second, "both handled", func() bool { return rec.completed("k") == 2 })
	rec.requireInOrder(t, map[string]int{"k": 2})
	rec.mu.Lock()
	runs := rec.runs
	rec.mu.Unlock()
	require.Equal(t, 2, runs, "each event ran once")
}

// TestOrderingWithoutInspectorKeyedRowsWait: a relay given neither Redis options nor Config.Inspector
// cannot track keyed events, so it leaves them pending (and says so) while unkeyed events flow.
func TestOrderingWithoutInspectorKeyedRowsWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insertKeyed(t, b.db, b.queue, "account.changed", []keyedPayload{{"k", 0}, {"", 0}})
	cfg := Config{Enqueuer: b.enq, Logger: b.logs.logger(), PollInterval: 50 * time.Millisecond}
	r, err := New(b.db, nil, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	stop := run(t, r)
	outboxtest.WaitFor(t, 10*time.Second, "the unkeyed event published, the keyed one handed over", func() bool {
		// The two rows may be in different lanes: the keyed one is handed to the per-row path by its own.
		return outboxtest.CountDelivered(t, b.db, "ordering_key IS NULL") == 1 && countStream(t, b.db).Waiting == 0
	})
	res := r.rounds.runAll(ctx)
	require.NoError(t, res.Err)
	require.Zero(t, res.Claimed, "the keyed event is not claimed")
	stop()
	require.NotEmpty(t, b.logs.matching("keyed events are waiting, but this relay relays none"))
}
