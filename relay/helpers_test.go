package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// testBundle is what most relay tests need: a fresh schema, a queue of their own on the shared Redis,
// an inspector on it, and a counting Enqueuer around a real client.
type testBundle struct {
	db        *bun.DB
	redis     asynq.RedisClientOpt
	queue     string
	inspector *asynq.Inspector
	enq       *countingEnqueuer
	logs      *logRecorder
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	return setupWith(t, db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
}

// setupPerRow is setup for the tests of the per-row path's own mechanics (its claim by queue and key,
// its byte budget, prepared statements, the charges of its rounds): the stream is turned off, so that
// the rows they write are rows of the per-row path, as the rows the stream hands over (failed
// enqueues, ordering keys) and the rows written before the stream are.
func setupPerRow(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	require.NoError(t, DisableStream(context.Background(), b.db, model.Location{}))
	return b
}

func setupWith(t *testing.T, db *bun.DB, redis asynq.RedisClientOpt) *testBundle {
	t.Helper()
	b := &testBundle{db: db, redis: redis, queue: "bunbox_test_" + randHex(6), logs: newLogRecorder(t)}
	b.inspector = asynq.NewInspector(redis)
	// The client the relay makes for itself, with its pipelining, so that every test runs through it.
	client, rdb, err := newClient(redis)
	if err != nil {
		t.Fatal(err)
	}
	b.enq = &countingEnqueuer{client: client, calls: map[string]int{}}
	t.Cleanup(func() {
		_ = b.inspector.DeleteQueue(b.queue, true)
		_ = b.inspector.Close()
		_ = rdb.Close()
	})
	return b
}

// newRelay builds a relay on the bundle with quick timings, logging to the recorder.
func (b *testBundle) newRelay(t *testing.T, cfg Config) *Relay {
	t.Helper()
	if cfg.Enqueuer == nil {
		cfg.Enqueuer = b.enq
	}
	cfg.Logger = cmpLogger(cfg.Logger, b.logs.logger())
	cfg.PollInterval = cmpDur(cfg.PollInterval, 50*time.Millisecond)
	cfg.RoundBackoff = cmpDur(cfg.RoundBackoff, 10*time.Millisecond)
	r, err := New(b.db, b.redis, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// run starts r.Run in the background and returns a stop function that cancels it and waits for its nil.
func run(t *testing.T, r *Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

// insertEvents commits n events into queue, in statements of up to 1000 rows.
func insertEvents(t testing.TB, db bun.IDB, queue string, n int) []*model.Event {
	t.Helper()
	events := make([]*model.Event, 0, n)
	for i := range n {
		ev, err := model.NewEvent("test.event", map[string]int{"n": i}, model.WithQueue(queue), model.WithMetadata("k", "v"))
		require.NoError(t, err)
		events = append(events, ev)
	}
	for chunk := range chunks(events, 1000) {
		_, err := db.NewInsert().Model(&chunk).Exec(context.Background())
		require.NoError(t, err)
	}
	return events
}

func chunks[T any](s []T, n int) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

func published(t testing.TB, db bun.IDB) int64 {
	return outboxtest.CountDelivered(t, db, "")
}

// requireDeliveredOnce checks with the inspector that every event is a task in queue, and that the
// queue holds nothing else.
func requireDeliveredOnce(t *testing.T, ins *asynq.Inspector, queue string, events []*model.Event) {
	t.Helper()
	info, err := ins.GetQueueInfo(queue)
	require.NoError(t, err)
	require.Equal(t, len(events), info.Size, "tasks in queue %s", queue)
	for _, ev := range events {
		ti, err := ins.GetTaskInfo(queue, ev.EventID.String())
		require.NoError(t, err, "event %s", ev.EventID)
		require.Equal(t, ev.Name, ti.Type)
	}
}

// countingEnqueuer wraps a real asynq client: it counts the enqueue calls per TaskID and can make chosen
// enqueues fail (fault injection without mocking Redis).
type countingEnqueuer struct {
	client *asynq.Client

	mu     sync.Mutex
	calls  map[string]int
	total  int
	fail   func(taskID string) error // nil: never
	before func(n int)               // called with the running total before each enqueue
}

func (c *countingEnqueuer) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	id := ""
	for _, o := range opts {
		if o.Type() == asynq.TaskIDOpt {
			id = o.Value().(string)
		}
	}
	c.mu.Lock()
	c.calls[id]++
	c.total++
	n, fail, before := c.total, c.fail, c.before
	c.mu.Unlock()
	if before != nil {
		before(n)
	}
	if fail != nil {
		if err := fail(id); err != nil {
			return nil, err
		}
	}
	return c.client.EnqueueContext(ctx, task, opts...)
}

func (c *countingEnqueuer) Ping() error { return c.client.Ping() }

func (c *countingEnqueuer) setFail(f func(string) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = f
}

func (c *countingEnqueuer) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// logRecorder keeps the relay's log records for assertions and echoes them to t.Log.
type logRecorder struct {
	t       *testing.T
	mu      sync.Mutex
	records []slog.Record
}

func newLogRecorder(t *testing.T) *logRecorder { return &logRecorder{t: t} }

func (l *logRecorder) logger() *slog.Logger { return slog.New(recorderHandler{l, nil}) }

// matching returns the records whose message contains msg.
func (l *logRecorder) matching(msg string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.records {
		if strings.Contains(r.Message, msg) {
			out = append(out, r)
		}
	}
	return out
}

type recorderHandler struct {
	l     *logRecorder
	attrs []slog.Attr
}

func (h recorderHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recorderHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.l.mu.Lock()
	h.l.records = append(h.l.records, r)
	h.l.mu.Unlock()
	if r.Level >= slog.LevelInfo {
		var sb strings.Builder
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&sb, " %s", a); return true })
		h.l.t.Logf("%s %s%s", r.Level, r.Message, sb.String())
	}
	return nil
}
func (h recorderHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recorderHandler{h.l, append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h recorderHandler) WithGroup(string) slog.Handler { return h }

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func cmpDur(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

func cmpLogger(a, b *slog.Logger) *slog.Logger {
	if a != nil {
		return a
	}
	return b
}

// bareRelay is a Relay on db with the default Config and none of New's checks (no Redis), for the tests
// of its reads.
func bareRelay(db *bun.DB) *Relay {
	r := &Relay{db: db, cfg: Config{}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	r.stmts = store.NewPrepared(context.Background(), db, false, r.names)
	r.engine()
	return r
}

// runAll runs the workers' iterations (runRounds) until one claims nothing, and adds up their outcomes: with
// the stream's lanes a stream round works one lane, so the rows of one test spread over several rounds.
// It stops at the first error, and after 100 iterations.
func (rs *rounds) runAll(ctx context.Context) BatchEvent {
	var total BatchEvent
	for range 100 {
		res := rs.runRounds(ctx)
		total = addRounds(total, res)
		if res.Err != nil || res.Claimed == 0 {
			break
		}
	}
	return total
}
