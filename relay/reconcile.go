package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// ReconcileResult describes one pass of a Reconciler.
type ReconcileResult struct {
	// Checked is the number of published rows whose task (or tasks, with Routes) was looked up in Redis.
	Checked int
	// Missing is the number of them of which Redis no longer had the task (or one of the tasks).
	Missing int
	// Requeued is the number of missing ones put back in line for the relay (a row that changed since it
	// was read, e.g. requeued by another reconciler, is not counted).
	Requeued int
	// Duration is how long the pass took.
	Duration time.Duration
}

// Reconciler re-delivers events whose asynq task Redis lost. asynq acknowledges an enqueue once Redis
// has it in memory; a failover to a replica that lagged, or a restart without persistence, loses such
// tasks although the relay has marked their rows published. The reconciler looks up, for every row
// published within Window, and every published row whose ProcessAt (model.WithProcessAt) is within
// Window or still ahead, the task with the event's id in the event's queue. A task in any state
// (pending, active, scheduled, aggregating, retry, archived, completed) is fine; a task scheduled with
// model.WithProcessAt is there as scheduled until its time. For a task that is gone the row's
// published_at is cleared, so the relay enqueues it again with the same TaskID (a conflict there means
// someone was faster, which is fine). Re-delivered events may already have been handled before the loss:
// consumers must be idempotent, which the bunx Inbox provides.
//
// Any number of reconcilers may run (e.g. one next to each relay): requeueing is conditional on the row
// being unchanged since it was read. A requeued row keeps its attempts; its last_error says why it was
// requeued.
//
// The relay enqueues a requeued row from the row, so with the same delivery options: a ProcessAt still
// ahead is scheduled again for that time, one that has passed makes the task pending.
//
// Limits: grouped events (model.WithGroup) are not checked, since asynq deletes the tasks it
// aggregated. A task deleted on purpose (Inspector.DeleteTask) or trimmed from a full archive (asynq keeps
// at most 10,000 archived tasks per queue, for 90 days) looks lost too and is delivered again. Rows
// deleted by the relay's cleanup (Config.Retention) are no longer checked.
type Reconciler struct {
	db      *bun.DB
	cfg     ReconcilerConfig
	log     *slog.Logger
	ins     TaskInspector
	redis   asynq.RedisConnOpt
	owned   *asynq.Inspector // the inspector NewReconciler made, closed by Close
	running atomic.Bool
}

// NewReconciler checks that the outbox table exists and that Redis answers, and returns a Reconciler.
// redis may be nil when cfg.Inspector is set. Invalid settings give an error wrapping ErrInvalidConfig
// that names the field; a missing table gives ErrNoSchema.
func NewReconciler(db *bun.DB, redis asynq.RedisConnOpt, cfg ReconcilerConfig) (*Reconciler, error) {
	if db == nil {
		return nil, errors.New("bunbox: relay.NewReconciler: db is nil")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Reconciler{db: db, cfg: cfg, log: cfg.Logger, ins: cfg.Inspector}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := checkSchema(ctx, db); err != nil {
		return nil, err
	}
	if r.ins == nil {
		if redis == nil {
			return nil, errors.New("bunbox: relay.NewReconciler: give the Redis options or ReconcilerConfig.Inspector")
		}
		ins, err := fromRedisOpt(redis, asynq.NewInspector)
		if err != nil {
			return nil, err
		}
		r.owned, r.ins, r.redis = ins, ins, redis
		// Listing the queues is a cheap call that fails only when Redis does not answer.
		if _, err := ins.Queues(); err != nil {
			_ = ins.Close()
			return nil, fmt.Errorf("bunbox: reconciler: Redis does not answer: %w", err)
		}
	}
	return r, nil
}

// Close releases the Redis connections of the inspector that NewReconciler made (none when
// ReconcilerConfig.Inspector was given). Call it after Run has returned.
func (r *Reconciler) Close() error {
	if r.owned == nil {
		return nil
	}
	return r.owned.Close()
}

// Run reconciles at once and then every Interval until ctx is done, and returns nil. A failed pass (Redis
// or PostgreSQL unreachable) is logged and tried again at the next interval, never returned. A second
// Run while one is running returns ErrRunning.
func (r *Reconciler) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)
	r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox reconciler started",
		slog.Duration("window", r.cfg.Window), slog.Duration("interval", r.cfg.Interval))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			r.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "bunbox reconciler stopped")
			return nil
		case <-timer.C:
		}
		res, err := r.ReconcileOnce(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler pass failed", slog.Any("err", err),
				slog.Int("checked", res.Checked), slog.Int("requeued", res.Requeued))
		case res.Missing > 0:
			r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox reconciler: tasks missing from Redis were requeued",
				slog.Int("checked", res.Checked), slog.Int("missing", res.Missing),
				slog.Int("requeued", res.Requeued), slog.Duration("duration", res.Duration))
		default:
			r.log.LogAttrs(ctx, slog.LevelDebug, "bunbox reconciler pass",
				slog.Int("checked", res.Checked), slog.Duration("duration", res.Duration))
		}
		timer.Reset(r.cfg.Interval)
	}
}

// reconcileRow is the part of a published row a pass needs.
type reconcileRow struct {
	ID          int64     `bun:"id"`
	EventID     uuid.UUID `bun:"event_id"`
	Name        string    `bun:"event_name"`
	Queue       string    `bun:"queue"`
	PublishedAt time.Time `bun:"published_at"`
}

// reconcilePageSQL reads a page of the rows to check. A row whose process_at is within Window or ahead is
// checked however long ago it was published: its task cannot have run before process_at, nor left Redis
// before TaskRetention after that. Grouped events (model.WithGroup) are left out: asynq deletes a group's
// tasks once it has aggregated them, so a missing task of theirs proves nothing.
const reconcilePageSQL = `SELECT id, event_id, event_name, queue, published_at FROM outbox_events
WHERE (published_at >= ?0 OR process_at >= ?0) AND published_at <= ?1 AND id > ?2 AND task_group IS NULL
ORDER BY id
LIMIT ?3`

// ReconcileOnce makes one pass over the rows published within Window, page by page in id order, and
// requeues those whose task Redis lost. Rows of a page are requeued before the next page is read, so a
// pass cut short by an error keeps what it did (see the result). The window is measured on the
// database's clock, which also stamped published_at.
func (r *Reconciler) ReconcileOnce(ctx context.Context) (res ReconcileResult, _ error) {
	start := r.cfg.now()
	defer func() { res.Duration = r.cfg.now().Sub(start) }()

	var dbNow time.Time
	if err := r.db.NewRaw("SELECT clock_timestamp()").Scan(ctx, &dbNow); err != nil {
		return res, fmt.Errorf("bunbox: reconciler: PostgreSQL: %w", err)
	}
	from := dbNow.Add(-r.cfg.Window)
	var after int64
	for {
		var rows []reconcileRow
		if err := r.db.NewRaw(reconcilePageSQL, from, dbNow, after, r.cfg.BatchSize).Scan(ctx, &rows); err != nil {
			return res, fmt.Errorf("bunbox: reconciler: read published rows: %w", err)
		}
		if len(rows) == 0 {
			return res, nil
		}
		after = rows[len(rows)-1].ID
		missing, err := r.findMissing(ctx, rows)
		res.Checked += len(rows)
		res.Missing += len(missing)
		if len(missing) > 0 {
			n, rerr := requeue(context.WithoutCancel(ctx), r.db, missing)
			res.Requeued += n
			for _, row := range missing {
				r.log.LogAttrs(ctx, slog.LevelDebug, "bunbox reconciler: task missing, requeued",
					slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()),
					slog.String("queue", row.Queue))
			}
			if rerr != nil {
				return res, fmt.Errorf("bunbox: reconciler: requeue: %w", rerr)
			}
		}
		if err != nil {
			return res, err
		}
		if len(rows) < r.cfg.BatchSize {
			return res, nil
		}
	}
}

// taskLookup is one task of a row to look up.
type taskLookup struct {
	row    int
	taskID string
}

// findMissing looks the rows' tasks up, at most Concurrency at once, and returns the rows of which a
// task is gone. Any other error (Redis unreachable) aborts: an unanswered look-up must never count as
// missing.
//
// asynq's Inspector finds a task only in a queue registered in Redis, and an asynq Client registers a
// queue at its first enqueue into it, once per Client: after Redis lost its data, a relay that kept
// running re-creates tasks in a queue nobody registers again, and every look-up says the queue does not
// exist although its tasks do. So a queue that is not found is registered again (see registerQueue) and
// its look-ups are made once more; only then does "queue not found" mean the task is gone.
func (r *Reconciler) findMissing(ctx context.Context, rows []reconcileRow) ([]reconcileRow, error) {
	lookups := make([]taskLookup, 0, len(rows))
	for i, row := range rows {
		id := row.EventID.String()
		listeners := r.cfg.Routes[row.Name]
		if len(listeners) == 0 {
			lookups = append(lookups, taskLookup{i, id})
			continue
		}
		for _, l := range listeners {
			lookups = append(lookups, taskLookup{i, id + ":" + l})
		}
	}
	gone := make([]bool, len(rows))
	noQueue, err := r.lookUp(ctx, rows, lookups, gone)
	if err != nil || len(noQueue) == 0 {
		return missingRows(rows, gone), err
	}
	queues := map[string]bool{}
	for _, lk := range noQueue {
		queues[rows[lk.row].Queue] = true
	}
	for q := range queues {
		if err := r.registerQueue(q); err != nil {
			return missingRows(rows, gone), fmt.Errorf("bunbox: reconciler: register queue %q again: %w", q, err)
		}
	}
	noQueue, err = r.lookUp(ctx, rows, noQueue, gone)
	for _, lk := range noQueue {
		gone[lk.row] = true // registered a moment ago and still not found: Redis has nothing of it
	}
	return missingRows(rows, gone), err
}

func missingRows(rows []reconcileRow, gone []bool) []reconcileRow {
	var missing []reconcileRow
	for i, row := range rows {
		if gone[i] {
			missing = append(missing, row)
		}
	}
	return missing
}

// lookUp makes the look-ups, at most Concurrency at once, sets gone for the rows with a task Redis does
// not have, and returns the look-ups whose queue is not registered.
func (r *Reconciler) lookUp(ctx context.Context, rows []reconcileRow, lookups []taskLookup, gone []bool) ([]taskLookup, error) {
	var (
		mu       sync.Mutex
		firstErr error
		noQueue  []taskLookup
		wg       sync.WaitGroup
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	sem := make(chan struct{}, r.cfg.Concurrency)
	for _, lk := range lookups {
		if failed() {
			break
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			row := &rows[lk.row]
			_, err := r.ins.GetTaskInfo(row.Queue, lk.taskID)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
			case errors.Is(err, asynq.ErrTaskNotFound):
				gone[lk.row] = true
			case errors.Is(err, asynq.ErrQueueNotFound):
				noQueue = append(noQueue, lk)
			case firstErr == nil:
				firstErr = fmt.Errorf("bunbox: reconciler: look up task %s in queue %q: %w", lk.taskID, row.Queue, err)
			}
		})
	}
	wg.Wait()
	return noQueue, firstErr
}

// registerQueueProbe is the id of the task registerQueue enqueues, far in the future, and deletes.
const registerQueueProbe = "bunbox-reconciler-queue-probe"

// registerQueue adds queue to the queues asynq's Inspector knows. asynq has no call for that but an
// enqueue from a Client that has not enqueued into the queue yet: a fresh Client enqueues a probe task
// scheduled a century ahead (no worker can take it) and the probe is deleted at once; the registration
// stays. With ReconcilerConfig.Inspector (no Redis options) it cannot, and a queue that is not found
// counts as lost.
func (r *Reconciler) registerQueue(queue string) error {
	if r.redis == nil || r.owned == nil {
		return nil
	}
	c, err := fromRedisOpt(r.redis, asynq.NewClient)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Enqueue(asynq.NewTask("bunbox:reconciler-probe", nil), asynq.Queue(queue), asynq.TaskID(registerQueueProbe),
		asynq.ProcessAt(time.Now().AddDate(100, 0, 0)), asynq.MaxRetry(0))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return err
	}
	if err := r.owned.DeleteTask(queue, registerQueueProbe); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return err
	}
	r.log.LogAttrs(context.Background(), slog.LevelInfo, "bunbox reconciler: registered an asynq queue again (Redis lost its data?)",
		slog.String("queue", queue))
	return nil
}

// requeue clears published_at of the rows that are still exactly as read (same published_at), so the
// relay enqueues them again; never of a keyed row seen completed, which would be handled after the events
// of its key that followed it. It returns how many rows it changed.
func requeue(ctx context.Context, db bun.IDB, rows []reconcileRow) (int, error) {
	ids := make([]int64, len(rows))
	at := make([]time.Time, len(rows))
	for i, row := range rows {
		ids[i], at[i] = row.ID, row.PublishedAt
	}
	res, err := db.NewRaw(`UPDATE outbox_events AS o
SET published_at = NULL, next_attempt_at = NULL, last_error = ?
FROM unnest(?::bigint[], ?::timestamptz[]) AS m(id, published_at)
WHERE o.id = m.id AND o.published_at = m.published_at AND o.completed_at IS NULL`,
		reconcileLastError, pgdialect.Array(ids), pgdialect.Array(at)).Exec(ctx)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
