package relay

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/maintenance/reconcile"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// marksBundle is an outbox with the stream on and a Redis, for the reconciler's time marks.
type marksBundle struct {
	db  *bun.DB
	opt asynq.RedisClientOpt
}

func setupMarks(t *testing.T) marksBundle {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	require.NoError(t, EnableStream(context.Background(), db, model.Location{}))
	return marksBundle{db: db, opt: asynq.RedisClientOpt{Addr: rd.Addr()}}
}

func (b marksBundle) reconciler(t *testing.T, cfg ReconcilerConfig) *Reconciler {
	t.Helper()
	rc, err := NewReconciler(b.db, b.opt, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// insert writes a streamed row of the queue "marks" created createdAgo ago and returns its event id.
func (b marksBundle) insert(t *testing.T, createdAgo time.Duration) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := b.db.ExecContext(context.Background(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, created_at)
VALUES (?, 'marks.test', 'marks', '{}', now() - make_interval(secs => ?::float8))`, id, createdAgo.Seconds())
	require.NoError(t, err)
	return id
}

// A pass records its time mark in bunbox_stream_marks once the stream is on, at most one per markEvery. A
// new Reconciler (younger than its window) starts its sweep's read of the stream's index at the latest
// recorded mark before the window, not at the least xid of the window's rows (the read of every streamed
// row the table keeps), and still finds the lost task of a row created within the window. An incremental
// pass starts at the greater of that mark and the xmin of the cursor read by the previous pass, with no
// read of the window's rows.
func TestReconcilerSweepStartsAtARecordedMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupMarks(t)
	const window = 2 * time.Second
	cfg := ReconcilerConfig{Window: window, Logger: outboxtest.Logger(t)}

	first := b.reconciler(t, cfg)
	for range 2 {
		_, err := first.ReconcileOnce(ctx)
		require.NoError(t, err)
	}
	var recorded string
	var at time.Time
	require.NoError(t, b.db.NewRaw("SELECT next_xid::text, at FROM bunbox_stream_marks").Scan(ctx, &recorded, &at),
		"one mark for two passes within markEvery")
	outboxtest.WaitFor(t, 10*time.Second, "the mark older than a window", func() bool {
		var past bool
		require.NoError(t, b.db.NewRaw("SELECT now() > ?::timestamptz + make_interval(secs => ?::float8)",
			at, (window+reconcile.MarkMargin).Seconds()).Scan(ctx, &past))
		return past
	})

	_, err := b.db.ExecContext(ctx, "SELECT pg_current_xact_id()") // the window's rows are past the mark
	require.NoError(t, err)
	old := b.insert(t, time.Hour) // created before the window: not checked
	lost := b.insert(t, 0)
	outboxtest.DeliverStream(t, b.db)

	second := b.reconciler(t, cfg)
	var now time.Time
	require.NoError(t, b.db.NewRaw("SELECT now()").Scan(ctx, &now))
	rg := reconcile.Range{From: now.Add(-window), To: now}
	start, ok, err := second.impl.StreamStart(ctx, rg, 0)
	require.NoError(t, err)
	require.True(t, ok)
	least, err := store.FirstStreamedXID(ctx, b.db, tables.Default(), rg.From, rg.To)
	require.NoError(t, err)
	require.NotEqual(t, least.String, start)
	require.Equal(t, recorded, strconv.FormatUint(start, 10), "the recorded mark, not the least xid of the window's rows")

	start, _, err = second.impl.StreamStart(ctx, rg, 18446744073709551000)
	require.NoError(t, err)
	require.EqualValues(t, uint64(18446744073709551000), start, "an incremental pass: its bound above the mark")
	start, _, err = second.impl.StreamStart(ctx, rg, 3)
	require.NoError(t, err)
	require.Equal(t, recorded, strconv.FormatUint(start, 10), "an incremental pass: the mark above its bound")

	res, err := second.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, []MissingTask{{EventID: lost, Queue: "marks"}}, res.MissingTasks)
	require.EqualValues(t, 1, outboxtest.CountUndelivered(t, b.db, "event_id = ?", lost))
	require.EqualValues(t, 1, outboxtest.Count(t, b.db, "outbox_events", "event_id = ? AND published_at = 'infinity'", old))
}

// Marks older than TaskRetention are deleted as a pass records its own.
func TestReconcilerDeletesOldMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupMarks(t)
	_, err := b.db.ExecContext(ctx, `INSERT INTO bunbox_stream_marks (at, next_xid)
VALUES (now() - interval '25 hours', '3'), (now() - interval '23 hours', '4')`)
	require.NoError(t, err)
	_, err = b.reconciler(t, ReconcilerConfig{TaskRetention: 24 * time.Hour}).ReconcileOnce(ctx)
	require.NoError(t, err)
	var left []string
	require.NoError(t, b.db.NewRaw("SELECT next_xid::text FROM bunbox_stream_marks ORDER BY at").Scan(ctx, &left))
	require.Len(t, left, 2)
	require.Equal(t, "4", left[0], "the mark of 25 hours ago is gone, that of 23 hours ago kept")
}

// Without bunbox_stream_marks (its migration not applied) a reconciler says so once at Warn and its passes
// succeed as before.
func TestReconcilerWithoutMarksTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupMarks(t)
	_, err := b.db.ExecContext(ctx, "DROP TABLE bunbox_stream_marks")
	require.NoError(t, err)
	lost := b.insert(t, 0)
	outboxtest.DeliverStream(t, b.db)
	logs := newLogRecorder(t)
	rc := b.reconciler(t, ReconcilerConfig{Logger: logs.logger()})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []MissingTask{{EventID: lost, Queue: "marks"}}, res.MissingTasks)
	_, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Len(t, logs.matching("cannot keep the stream's time marks"), 1)
}
