package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// setupPrivateReconcile is setupReconcile on a PostgreSQL of the test's own: the reconciler's cursor
// waits for the transactions open in the database, and other tests' transactions would move it.
func setupPrivateReconcile(t *testing.T) *reconcileBundle {
	t.Helper()
	pg := outboxtest.StartPostgres(t)
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	b := &reconcileBundle{db: pg.Schema(t), redis: rd, opt: asynq.RedisClientOpt{Addr: rd.Addr()}, queue: "reconcile"}
	b.inspector = asynq.NewInspector(b.opt)
	t.Cleanup(func() { _ = b.inspector.Close() })
	return b
}

func (b *reconcileBundle) insertInto(t *testing.T, queue string, n int) []*model.Event {
	t.Helper()
	q := b.queue
	b.queue = queue
	defer func() { b.queue = q }()
	return b.insert(t, n)
}

// Each published row is looked up in the pass after it was published, and not again while Redis keeps
// its data: the cost of a pass follows what was published since the last one, not the window.
func TestReconcilerCursorChecksEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setupPrivateReconcile(t)
	ctx := context.Background()
	b.insert(t, 50)
	b.relayAll(t)
	rc := newReconciler(t, b, relay.ReconcilerConfig{BatchSize: 7})

	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.True(t, res.Swept, "the first pass sweeps")
	require.Equal(t, 50, res.Checked)

	for range 3 {
		res, err = rc.ReconcileOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, relay.ReconcileResult{Duration: res.Duration}, res, "nothing published since the last pass")
	}

	fresh := b.insertInto(t, "other", 20)
	b.relayAll(t)
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.False(t, res.Swept)
	require.Equal(t, 20, res.Checked, "the rows published since, in a queue new to the reconciler too")
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Checked)

	// A task deleted by hand is no data loss a marker sees: the next pass does not notice it, Sweep does.
	require.NoError(t, b.inspector.DeleteTask("other", fresh[4].EventID.String()))
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Checked)
	res, err = rc.Sweep(ctx)
	require.NoError(t, err)
	require.True(t, res.Swept)
	require.Equal(t, relay.ReconcileResult{Checked: 70, Missing: 1, Requeued: 1, Swept: true, Duration: res.Duration,
		MissingTasks: []relay.MissingTask{{EventID: fresh[4].EventID, Queue: "other"}}}, res)
	b.relayAll(t)
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Checked, "the row published again")
	require.Zero(t, res.Missing)
}

// A lane whose rows wait while other lanes move (its cursor row held by a round that has not finished,
// here a session of the test's, which holds every snapshot's xmin back too) holds back neither the
// other lanes' reads nor its own: the pass that runs meanwhile checks the other lanes' new rows, the
// next one none again, and the pass after the held lane delivers checks the held lane's rows, and finds
// the task Redis lost. (With the bound at the xmin of the held lane's snapshot, every pass meanwhile
// checked the other lanes' rows again; with a bound that passed the held lane's rows, the last pass
// would check none of them.)
func TestReconcilerCursorWaitsForHeldLanes(t *testing.T) {
	t.Parallel()
	b := setupPrivateReconcile(t)
	ctx := context.Background()
	// A test of the stream's lanes, also under BUNBOX_TEST_STREAM=off.
	require.NoError(t, relay.EnableStream(ctx, b.db, model.Location{}))
	// intoLane puts every alpha row in one lane, before any relay reads them.
	intoLane := func(events []*model.Event) {
		ids := make([]any, len(events))
		for i, ev := range events {
			ids[i] = ev.EventID
		}
		_, err := b.db.NewRaw("UPDATE outbox_events SET stream_slice = 0 WHERE event_id IN (?)", bun.List(ids)).Exec(ctx)
		require.NoError(t, err)
	}
	intoLane(b.insertInto(t, "alpha", 3))
	b.insertInto(t, "beta", 3)
	b.relayAll(t)
	rc := newReconciler(t, b, relay.ReconcilerConfig{})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, res.Checked)

	// The rows commit before the session takes the lane, so that its transaction, open at each pass,
	// does not hold the bound back by itself.
	late := b.insertInto(t, "alpha", 2)
	intoLane(late)
	held, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = held.Rollback() }()
	var lane string
	require.NoError(t, held.NewRaw("SELECT name FROM bunbox_stream WHERE name = 'outbox/alpha/0' FOR UPDATE").Scan(ctx, &lane))
	b.insertInto(t, "beta", 4)
	b.relayWhere(t, nil, "queue = 'beta'")
	require.EqualValues(t, 2, outboxtest.CountUndelivered(t, b.db, ""), "the held lane's rows wait")
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, res.Checked, "the other lane's new rows")
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Checked, "the other lane's rows again, while the held lane waits")

	require.NoError(t, held.Rollback())
	b.relayAll(t)
	require.NoError(t, b.inspector.DeleteTask("alpha", late[1].EventID.String()))
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, relay.ReconcileResult{Checked: 2, Missing: 1, Requeued: 1, Duration: res.Duration,
		MissingTasks: []relay.MissingTask{{EventID: late[1].EventID, Queue: "alpha"}}}, res, "the held lane's rows")
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Checked, "the bound moved past every row")
}

// A streamed row written by a transaction that was open when a pass read the cursors, and delivered after
// that pass wrote its markers, is checked by the next pass: the pass's range of the stream's index starts
// above the rows committed before its read, and the open transaction's xid, below that start, is read as
// a range of its own (it was in progress in the snapshots the pass read). Without that read, the task
// Redis lost here would not be found until a sweep.
func TestReconcilerCursorReadsTheTransactionsOpenAtThePreviousPass(t *testing.T) {
	t.Parallel()
	b := setupPrivateReconcile(t)
	ctx := context.Background()
	// A test of the stream, also under BUNBOX_TEST_STREAM=off.
	require.NoError(t, relay.EnableStream(ctx, b.db, model.Location{}))
	b.insert(t, 3)
	b.relayAll(t)
	rc := newReconciler(t, b, relay.ReconcilerConfig{})
	_, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)

	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	late, err := model.NewEvent("reconcile.test", map[string]int{"n": 0}, model.WithQueue(b.queue))
	require.NoError(t, err)
	_, err = tx.NewInsert().Model(late).Exec(ctx)
	require.NoError(t, err)
	b.insert(t, 2) // committed by transactions that began after it
	b.relayAll(t)
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Checked)

	require.NoError(t, tx.Commit())
	b.relayAll(t)
	require.NoError(t, b.inspector.DeleteTask(b.queue, late.EventID.String()))
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, relay.ReconcileResult{Checked: 1, Missing: 1, Requeued: 1, Duration: res.Duration,
		MissingTasks: []relay.MissingTask{{EventID: late.EventID, Queue: b.queue}}}, res)
	require.EqualValues(t, 1, outboxtest.CountUndelivered(t, b.db, "event_id = ?", late.EventID))
}

// A relay's round stamps its rows with its transaction's start and commits them later. A task it
// enqueues after a pass wrote its markers, and that Redis then loses without losing the markers (a
// failover to a replica that had the markers but not the task), must be found by the next pass although
// its row's published_at is older than that pass.
func TestReconcilerCursorWaitsForOpenTransactions(t *testing.T) {
	t.Parallel()
	b := setupPrivateReconcile(t)
	ctx := context.Background()
	b.insert(t, 5)
	b.relayAll(t)
	rc := newReconciler(t, b, relay.ReconcilerConfig{})
	_, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)

	// A round begins: its transaction starts before the next pass, which sees nothing to check.
	late := b.insert(t, 1)[0]
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var started time.Time
	require.NoError(t, tx.NewRaw("SELECT now()").Scan(ctx, &started))
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Checked)

	// The round enqueues after the pass wrote its markers, marks the row with its start and commits.
	client := asynq.NewClient(b.opt)
	defer client.Close()
	_, err = client.Enqueue(asynq.NewTask(late.Name, late.Payload), asynq.TaskID(late.EventID.String()), asynq.Queue(b.queue))
	require.NoError(t, err)
	_, err = tx.NewRaw("UPDATE outbox_events SET published_at = now() WHERE event_id = ?", late.EventID).Exec(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	// Redis loses the task and keeps the markers.
	require.NoError(t, b.inspector.DeleteTask(b.queue, late.EventID.String()))

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.False(t, res.Swept)
	require.Equal(t, relay.ReconcileResult{Checked: 1, Missing: 1, Requeued: 1, Duration: res.Duration,
		MissingTasks: []relay.MissingTask{{EventID: late.EventID, Queue: b.queue}}}, res)
	require.EqualValues(t, 1, outboxtest.CountUndelivered(t, b.db, "event_id = ?", late.EventID))
}

// A marker gone from a queue's slot (that part of Redis lost its data) makes the next pass sweep that
// queue's rows of the whole window, and only that queue's.
func TestReconcilerSweepsTheQueuesThatLostData(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	a := b.insertInto(t, "alpha", 12)
	b.insertInto(t, "beta", 8)
	b.relayAll(t)
	rc := newReconciler(t, b, relay.ReconcilerConfig{BatchSize: 5})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 20, res.Checked)

	// alpha's slot loses its data: its tasks and the reconciler's marker there.
	rdb := redis.NewClient(&redis.Options{Addr: b.redis.Addr()})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "*{alpha}*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	require.NoError(t, rdb.Del(ctx, keys...).Err())

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.True(t, res.Swept)
	require.Equal(t, []string{"alpha"}, res.LostQueues)
	require.GreaterOrEqual(t, res.Checked, 12, "alpha's rows, and beta's only if a transaction held the cursor back")
	require.Equal(t, 12, res.Missing)
	require.Equal(t, 12, res.Requeued)
	b.relayAll(t)
	b.queue = "alpha"
	b.requireTasks(t, a)

	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.False(t, res.Swept)
	require.Empty(t, res.LostQueues)
	require.Zero(t, res.Missing)
}

// A queue whose only row was published before the window but is scheduled ahead stays watched: when Redis
// loses its data, the scheduled task is found missing and requeued.
func TestReconcilerKeepsWatchingScheduledRows(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	ev, err := model.NewEvent("reconcile.test", nil, model.WithQueue("later"), model.WithProcessIn(24*time.Hour))
	require.NoError(t, err)
	_, err = b.db.NewInsert().Model(ev).Exec(ctx)
	require.NoError(t, err)
	b.relayAll(t)
	_, err = b.db.ExecContext(ctx, "UPDATE outbox_events SET published_at = now() - interval '2 hours' WHERE id = ?", ev.ID)
	require.NoError(t, err)

	rc := newReconciler(t, b, relay.ReconcilerConfig{Window: time.Hour})
	res, err := rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Checked, "the first pass sweeps the scheduled row")
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res.LostQueues)

	b.redis.Stop(t)
	b.redis.Start(t)
	res, err = rc.ReconcileOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"later"}, res.LostQueues)
	require.Equal(t, 1, res.Requeued)
}
