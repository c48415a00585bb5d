package worker_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/worker"
)

func TestAsynqRedeliverySpan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		maxRetry int
		timeout  time.Duration
		want     time.Duration
	}{
		// One attempt: its timeout and the recovery of a dead worker's task.
		{"NoRetry", 0, time.Minute, 3 * time.Minute},
		// Retry 1 waits at most 0+15+29 s.
		{"OneRetry", 1, 0, 44*time.Second + 2*2*time.Minute},
		// asynq's defaults: Σ n⁴ (n < 25) = 1,763,020 s, Σ 15 = 375 s, Σ 29(n+1) = 9,425 s, 26 × 32m.
		{"AsynqDefaults", 25, 30 * time.Minute, 1_772_820*time.Second + 26*32*time.Minute},
		{"Saturates", 1 << 20, time.Hour, 1<<63 - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, worker.AsynqRedeliverySpan(tc.maxRetry, tc.timeout))
		})
	}
	require.Greater(t, worker.AsynqRedeliverySpan(25, 30*time.Minute), 21*24*time.Hour)
	require.Less(t, worker.AsynqRedeliverySpan(25, 30*time.Minute), worker.InboxWindowDefault)
}

func TestInboxCleanerConfig(t *testing.T) {
	t.Parallel()
	// A pool that never connects: the configuration is checked without a server.
	sqldb := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN("postgres://nobody@127.0.0.1:1/none?sslmode=disable")))
	t.Cleanup(func() { _ = sqldb.Close() })
	in := worker.NewInbox(bun.NewDB(sqldb, pgdialect.New()))
	c, err := worker.NewInboxCleaner(in, worker.InboxCleanerConfig{})
	require.NoError(t, err)
	cfg := worker.CleanerConfig(c)
	require.Equal(t, worker.InboxWindowDefault, cfg.Window)
	require.Equal(t, 25, cfg.MaxRetry)
	require.Equal(t, 30*time.Minute, cfg.TaskTimeout)
	require.Equal(t, 1000, cfg.BatchSize)
	require.Equal(t, time.Hour, cfg.Interval)
	require.Equal(t, 24*time.Hour, cfg.TaskRetention)
	require.Equal(t, time.Hour, cfg.ReconcileWindow)
	require.Equal(t, time.Hour, cfg.ReconcileMargin)
	require.Equal(t, worker.AsynqRedeliverySpan(25, 30*time.Minute), cfg.MinWindow())
	// The defaults are the relay's: the cleaner cannot import relay, so this test keeps them together.
	// The relay's defaults (relay.Config.TaskRetention, ReconcilerConfig.Window; TestDefaultsTheInboxAssumes).
	require.Equal(t, 24*time.Hour, worker.InboxTaskRetentionDefault)
	require.Equal(t, time.Hour, worker.InboxReconcileWindowDefault)

	for _, tc := range []struct {
		name string
		cfg  worker.InboxCleanerConfig
		want string // "" = valid
	}{
		{"ShorterThanAsynqDefaults", worker.InboxCleanerConfig{Window: 7 * 24 * time.Hour},
			"Window 168h0m0s is too short: asynq may deliver a task again up to 506h"},
		{"ShortWithFewRetries", worker.InboxCleanerConfig{Window: 48 * time.Hour, MaxRetry: 3, TaskTimeout: time.Minute}, ""},
		// Few retries: the reconciler's span, max(TaskRetention 24h, ReconcileWindow 1h) + 1h, is the longest.
		{"ShorterThanReconcileSpan", worker.InboxCleanerConfig{Window: 24 * time.Hour, MaxRetry: 1, TaskTimeout: time.Minute},
			"Window 24h0m0s is too short: the relay's reconciler may enqueue a handled event again up to max(TaskRetention 24h0m0s, ReconcileWindow 1h0m0s) + ReconcileMargin 1h0m0s"},
		{"ReconcileSpan", worker.InboxCleanerConfig{Window: 25 * time.Hour, MaxRetry: 1, TaskTimeout: time.Minute}, ""},
		// A relay that keeps completed tasks for a week: the reconciler may look back that far.
		{"LongTaskRetention", worker.InboxCleanerConfig{Window: 48 * time.Hour, MaxRetry: 3, TaskTimeout: time.Minute, TaskRetention: 7 * 24 * time.Hour},
			"make Window at least 169h0m0s"},
		// A reconciler window longer than TaskRetention (the relay refuses it; the cleaner takes the larger).
		{"LongReconcileWindow", worker.InboxCleanerConfig{Window: 48 * time.Hour, MaxRetry: 3, TaskTimeout: time.Minute, ReconcileWindow: 60 * time.Hour, ReconcileMargin: 30 * time.Minute},
			"make Window at least 60h30m0s"},
		{"ShorterThanFloor", worker.InboxCleanerConfig{Window: time.Hour, MaxRetry: 1, TaskTimeout: time.Minute, TaskRetention: time.Hour, ReconcileMargin: time.Minute},
			"Window 1h0m0s is too short: a reconciler may enqueue a handled event again within the relay's TaskRetention (at least 24h0m0s in any case)"},
		{"ShorterThanGivenSpan", worker.InboxCleanerConfig{Window: 48 * time.Hour, RedeliverySpan: 72 * time.Hour},
			"Window 48h0m0s is too short: RedeliverySpan is 72h0m0s"},
		{"GivenSpan", worker.InboxCleanerConfig{Window: 4 * 24 * time.Hour, RedeliverySpan: 72 * time.Hour}, ""},
		{"Negative", worker.InboxCleanerConfig{Window: -time.Hour}, "Window -1h0m0s is too short"},
		{"MaxRetry", worker.InboxCleanerConfig{MaxRetry: 101}, "MaxRetry must be between 0 and 100, got 101"},
		{"TaskTimeout", worker.InboxCleanerConfig{TaskTimeout: -1}, "TaskTimeout must not be negative"},
		{"RedeliverySpan", worker.InboxCleanerConfig{RedeliverySpan: -1}, "RedeliverySpan must not be negative"},
		{"BatchSize", worker.InboxCleanerConfig{BatchSize: 10001}, "BatchSize must be between 1 and 10000, got 10001"},
		{"Interval", worker.InboxCleanerConfig{Interval: -time.Second}, "Interval must not be negative"},
		{"TaskRetention", worker.InboxCleanerConfig{TaskRetention: time.Millisecond}, "TaskRetention must be at least 1s"},
		{"ReconcileWindow", worker.InboxCleanerConfig{ReconcileWindow: -time.Hour}, "ReconcileWindow must not be negative"},
		{"ReconcileMargin", worker.InboxCleanerConfig{ReconcileMargin: -time.Hour}, "ReconcileMargin must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := worker.NewInboxCleaner(in, tc.cfg)
			if tc.want == "" {
				require.NoError(t, err)
				require.NotNil(t, c)
				return
			}
			require.ErrorContains(t, err, "worker: invalid InboxCleanerConfig: ")
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, c)
		})
	}
	_, err = worker.NewInboxCleaner(nil, worker.InboxCleanerConfig{})
	require.ErrorContains(t, err, "the inbox must not be nil")
}

// deleteSizes records the rows each DELETE statement on inbox_events removed.
type deleteSizes struct {
	mu    sync.Mutex
	sizes []int64
}

func (*deleteSizes) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }

func (d *deleteSizes) AfterQuery(_ context.Context, ev *bun.QueryEvent) {
	if !strings.HasPrefix(ev.Query, "DELETE FROM inbox_events") || ev.Err != nil || ev.Result == nil {
		return
	}
	n, _ := ev.Result.RowsAffected()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sizes = append(d.sizes, n)
}

func (d *deleteSizes) get() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int64(nil), d.sizes...)
}

// seedInbox writes n records of handler, handled age ago.
func seedInbox(t *testing.T, db bun.IDB, handler string, n int, age time.Duration) {
	t.Helper()
	for range n {
		_, err := db.NewRaw("INSERT INTO inbox_events (event_id, handler, handled_at) VALUES (?, ?, now() - ? * interval '1 second')",
			uuid.Must(uuid.NewV7()), handler, int64(age.Seconds())).Exec(context.Background())
		require.NoError(t, err)
	}
}

// TestInboxCleanerDeletesOldRecordsInBatches: records past the window go, in statements of at most
// BatchSize rows; records within it stay, and so does their dedupe.
func TestInboxCleanerDeletesOldRecordsInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	deletes := &deleteSizes{}
	db.AddQueryHook(deletes) //nolint:staticcheck // on this test's *bun.DB, which the retention code runs on
	window := 48 * time.Hour
	seedInbox(t, db, "ship", 23, window+time.Hour)
	seedInbox(t, db, "audit", 2, 90*24*time.Hour)
	seedInbox(t, db, "ship", 4, window-time.Hour)
	seedInbox(t, db, "ship", 1, 0)

	in := worker.NewInbox(db, worker.WithInboxLogger(outboxtest.Logger(t)))
	c, err := worker.NewInboxCleaner(in, worker.InboxCleanerConfig{Window: window, MaxRetry: 3, TaskTimeout: time.Minute, BatchSize: 10})
	require.NoError(t, err)
	n, err := c.Cleanup(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 25, n)
	require.Equal(t, []int64{10, 10, 5}, deletes.get(), "one statement per batch of at most BatchSize")
	require.EqualValues(t, 5, outboxtest.Count(t, db, "inbox_events", ""))
	require.EqualValues(t, 0, outboxtest.Count(t, db, "inbox_events", "handled_at < now() - interval '48 hours'"))

	// A second pass finds nothing: one statement that deletes nothing.
	n, err = c.Cleanup(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, []int64{10, 10, 5, 0}, deletes.get())
}

// TestInboxCleanerRun cleans at once when started and returns nil when its context ends.
func TestInboxCleanerRun(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	seedInbox(t, db, "ship", 3, 40*24*time.Hour)
	seedInbox(t, db, "ship", 2, time.Minute)
	c, err := worker.NewInboxCleaner(worker.NewInbox(db), worker.InboxCleanerConfig{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	outboxtest.WaitFor(t, 10*time.Second, "the first pass", func() bool {
		return outboxtest.Count(t, db, "inbox_events", "") == 2
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// TestInboxCleanerMissingTable names the fix.
func TestInboxCleanerMissingTable(t *testing.T) {
	t.Parallel()
	db := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
	c, err := worker.NewInboxCleaner(worker.NewInbox(db), worker.InboxCleanerConfig{})
	require.NoError(t, err)
	_, err = c.Cleanup(context.Background())
	require.ErrorContains(t, err, "the inbox table is missing: apply the migrations")
}

// TestInboxCleanerKeepsWhatTheReconcilerMayRedeliver: with few retries, asynq's own redelivery span is
// minutes, but the relay's reconciler may enqueue an event again until max(TaskRetention, its Window) +
// a margin after it was published (25h with the relay's defaults): a record younger than that stays, so
// the copy is skipped instead of running the handler twice.
func TestInboxCleanerKeepsWhatTheReconcilerMayRedeliver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	seedInbox(t, db, "ship", 3, 24*time.Hour+30*time.Minute) // within the reconciler's reach
	seedInbox(t, db, "ship", 2, 26*time.Hour)                // past it

	in := worker.NewInbox(db, worker.WithInboxLogger(outboxtest.Logger(t)))
	cfg := worker.InboxCleanerConfig{MaxRetry: 1, TaskTimeout: time.Minute}
	_, err := worker.NewInboxCleaner(in, worker.InboxCleanerConfig{MaxRetry: 1, TaskTimeout: time.Minute, Window: 24 * time.Hour})
	require.ErrorContains(t, err, "Window 24h0m0s is too short: the relay's reconciler may enqueue")

	_, err = worker.NewInboxCleaner(in, cfg)
	require.NoError(t, err)
	minWindow := cfg.MinWindow()
	require.Equal(t, 25*time.Hour, minWindow)
	cfg.Window = minWindow
	c, err := worker.NewInboxCleaner(in, cfg)
	require.NoError(t, err)
	n, err := c.Cleanup(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.EqualValues(t, 3, outboxtest.Count(t, db, "inbox_events", ""))
}
