package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// Inspector is what the relay (for keyed events, model.WithOrderingKey, and cancels) and the Reconciler
// need from asynq: *asynq.Inspector implements it. GetTaskInfo must return an error wrapping
// asynq.ErrTaskNotFound or asynq.ErrQueueNotFound for a task Redis does not have. The Reconciler only
// looks tasks up.
type Inspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

var _ Inspector = (*asynq.Inspector)(nil)

// keyTracker is the relay's part of per-key ordering: it looks up the tasks of the keyed rows in flight
// (published, not completed, not dead) and records what asynq did with them.
//
//   - all of the row's tasks completed: completed_at is set, which makes the key's next row its head; the
//     relay is woken to claim it.
//   - a task archived (asynq gave up after its retries, or the handler returned SkipRetry): the row is
//     marked dead with asynq's last error, and blocks its key until `bunbox dead retry` (admin.RetryDead), after
//     which the relay deletes the archived task and enqueues a fresh one.
//   - a task missing from Redis: Redis lost it (a failover or a restart without persistence) or, when no
//     relay looked for longer than TaskRetention, asynq dropped it after it completed. Either way the row is
//     put back in line and enqueued again. The key stays held meanwhile, so a repeated delivery can never
//     overtake the events that follow; the price is that an event may run twice (the bunx Inbox absorbs
//     that), never that one is lost.
//   - pending, scheduled, active, retry: the row waits.
//
// Every relay runs one; they share the rows with FOR UPDATE SKIP LOCKED.
type keyTracker struct {
	ins   Inspector
	rdb   redis.UniversalClient // reads the tasks' states in one pipeline; nil with Config.Inspector
	ownDB bool                  // rdb was made for the tracker, closed by Close
	owned *asynq.Inspector      // the inspector the relay made, closed by Close
	redis asynq.RedisConnOpt    // to register a queue Redis forgot; nil with Config.Inspector
	kick  chan struct{}         // keyed rows were published: look soon

	mu         sync.Mutex           // held while a queue is registered
	registered map[string]time.Time // queues registered again, and when
}

func (r *Relay) newKeyTracker(opt asynq.RedisConnOpt) error {
	t := &keyTracker{ins: r.cfg.Inspector, kick: make(chan struct{}, 1), registered: map[string]time.Time{}}
	if t.ins == nil {
		if opt == nil {
			return nil // keyed rows wait; Run says so
		}
		ins, err := fromRedisOpt(opt, asynq.NewInspector)
		if err != nil {
			return err
		}
		t.ins, t.owned, t.redis = ins, ins, opt
		if t.rdb = r.rdb; t.rdb == nil {
			if t.rdb, _, err = pipelinedRedis(opt); err != nil {
				_ = ins.Close()
				return err
			}
			t.ownDB = true
		}
	}
	r.keys = t
	return nil
}

func (t *keyTracker) close() error {
	if t == nil || t.owned == nil {
		return nil
	}
	err := t.owned.Close()
	if t.ownDB {
		err = errors.Join(err, t.rdb.Close())
	}
	return err
}

// published tells the tracker that a round committed; it looks at once if keyed rows were among them.
func (t *keyTracker) published(events []model.Event) {
	if t == nil {
		return
	}
	for i := range events {
		if events[i].OrderingKey != "" {
			select {
			case t.kick <- struct{}{}:
			default:
			}
			return
		}
	}
}

// keyCheckBackoff is how many times KeyCheckInterval the tracker waits at most while keyed rows are in
// flight and nothing changes; keyCheckPatience is how many passes without a change it makes at
// KeyCheckInterval before it starts backing off.
const (
	keyCheckBackoff  = 10
	keyCheckPatience = 10
)

// trackKeys runs tracker passes until ctx is done: every KeyCheckInterval while keyed rows are in flight,
// backing off (doubling up to keyCheckBackoff times that) after keyCheckPatience passes in a row saw no
// change, and every PollInterval when none are in flight. A round that published keyed rows kicks it and
// resets the backoff; a pass that released keys wakes the relay's loop.
func (r *Relay) trackKeys(ctx context.Context, wake chan<- struct{}) {
	t := r.keys
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures, quiet := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-t.kick:
			quiet = 0
		}
		res, err := r.trackOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if res.Completed > 0 || res.Requeued > 0 {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		var wait time.Duration
		switch {
		case err != nil:
			failures++
			wait = r.cfg.roundBackoff(failures)
			r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: checking keyed events failed, backing off",
				slog.Int("attempt", failures), slog.Duration("delay", wait), slog.Any("err", err))
		case res.InFlight == 0:
			failures, quiet = 0, 0
			wait = r.cfg.PollInterval
		case res.Completed+res.Dead+res.Requeued > 0:
			failures, quiet = 0, 0
			wait = r.cfg.KeyCheckInterval
		default:
			failures = 0
			quiet++
			wait = r.cfg.KeyCheckInterval
			if over := quiet - keyCheckPatience; over > 0 {
				wait = min(r.cfg.KeyCheckInterval<<min(over, 8), keyCheckBackoff*r.cfg.KeyCheckInterval)
			}
		}
		timer.Reset(wait)
	}
}

// trackResult describes one tracker pass.
type trackResult struct {
	InFlight  int // keyed rows in flight that the pass looked at
	Completed int // of them, completed: their keys moved on
	Dead      int // of them, archived by asynq: their keys are blocked
	Requeued  int // of them, missing from Redis: put back in line
}

// trackPageSize is how many keyed rows in flight one tracker transaction locks and looks up.
const trackPageSize = 500

// trackOnce makes one pass over the keyed rows in flight, a page at a time in id order.
func (r *Relay) trackOnce(ctx context.Context) (trackResult, error) {
	var res trackResult
	var after int64
	for ctx.Err() == nil {
		n, last, err := r.trackPage(ctx, after, &res)
		if err != nil || n < trackPageSize {
			return res, err
		}
		after = last
	}
	return res, nil
}

// inflightRow is the part of a keyed row in flight that the tracker needs.
type inflightRow struct {
	ID      int64
	EventID uuid.UUID
	Name    string
	Queue   string
	Key     string
}

// keyOutcome is what the tracker found for a row.
type keyOutcome int

const (
	keyWaiting keyOutcome = iota
	keyCompleted
	keyArchived
	keyMissing
)

func (r *Relay) trackPage(ctx context.Context, after int64, res *trackResult) (n int, last int64, err error) {
	bg := context.WithoutCancel(ctx) // what was looked up is written
	tx, err := r.begin(bg)           // READ COMMITTED, bounded (session.go)
	if err != nil {
		return 0, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, r.names.SQL(`SELECT id, event_id, event_name, queue, ordering_key FROM outbox_events
WHERE ordering_key IS NOT NULL AND completed_at IS NULL AND published_at IS NOT NULL AND dead_at IS NULL AND id > ?
  AND published_at <> 'infinity' -- a keyed row of the stream has no task: the stream hands it over (stream_round.go)
ORDER BY id
LIMIT ?
FOR UPDATE SKIP LOCKED`), after, trackPageSize)
	if err != nil {
		return 0, 0, fmt.Errorf("read keyed rows in flight: %w", err)
	}
	var inflight []inflightRow
	for rows.Next() {
		var row inflightRow
		if err := rows.Scan(&row.ID, &row.EventID, &row.Name, &row.Queue, &row.Key); err != nil {
			rows.Close()
			return 0, 0, err
		}
		inflight = append(inflight, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	if len(inflight) == 0 {
		return 0, 0, nil
	}
	res.InFlight += len(inflight)
	outcomes, lastErrs, err := r.lookUpKeyed(ctx, inflight)
	if err != nil {
		return 0, 0, err
	}
	var completed, missing, dead []int64
	var deadErrs []string
	for i, o := range outcomes {
		switch o {
		case keyCompleted:
			completed = append(completed, inflight[i].ID)
		case keyMissing:
			missing = append(missing, inflight[i].ID)
		case keyArchived:
			dead = append(dead, inflight[i].ID)
			deadErrs = append(deadErrs, truncate(lastErrs[i], 2000))
		}
	}
	if len(completed)+len(missing)+len(dead) == 0 {
		return len(inflight), inflight[len(inflight)-1].ID, nil
	}
	if len(completed) > 0 {
		if _, err := tx.NewRaw(r.names.SQL(`UPDATE outbox_events SET completed_at = clock_timestamp() WHERE id = ANY(?)`),
			pgdialect.Array(completed)).Exec(bg); err != nil {
			return 0, 0, fmt.Errorf("mark completed: %w", err)
		}
	}
	if len(missing) > 0 {
		if _, err := tx.NewRaw(r.names.SQL(`UPDATE outbox_events SET published_at = NULL, next_attempt_at = NULL, last_error = ?
WHERE id = ANY(?)`), keyMissingLastError, pgdialect.Array(missing)).Exec(bg); err != nil {
			return 0, 0, fmt.Errorf("requeue missing: %w", err)
		}
	}
	if len(dead) > 0 {
		if _, err := tx.NewRaw(r.names.SQL(`UPDATE outbox_events AS o SET dead_at = now(), last_error = d.err
FROM unnest(?::bigint[], ?::text[]) AS d(id, err) WHERE o.id = d.id`),
			pgdialect.Array(dead), pgdialect.Array(deadErrs)).Exec(bg); err != nil {
			return 0, 0, fmt.Errorf("mark archived dead: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("commit: %w", err)
	}
	res.Completed += len(completed)
	res.Requeued += len(missing)
	res.Dead += len(dead)
	r.counters.completed.Add(int64(len(completed)))
	r.counters.dead.Add(int64(len(dead)))
	for i, o := range outcomes {
		row := &inflight[i]
		switch o {
		case keyMissing:
			r.log.LogAttrs(bg, slog.LevelWarn, "bunbox relay: the task of a keyed event is missing from Redis; enqueued again",
				slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()), slog.String("ordering_key", row.Key))
		case keyArchived:
			r.log.LogAttrs(bg, slog.LevelError, "bunbox relay: asynq archived the task of a keyed event; its key is blocked until it is retried",
				slog.Int64("outbox_id", row.ID), slog.String("event_id", row.EventID.String()),
				slog.String("task_type", row.Name), slog.String("ordering_key", row.Key), slog.String("err", lastErrs[i]))
			if r.cfg.Observer.OnDead != nil {
				r.cfg.Observer.OnDead(bg, DeadEvent{ID: row.ID, EventID: row.EventID.String(), EventName: row.Name,
					Err: errors.New(lastErrs[i])})
			}
		}
	}
	return len(inflight), inflight[len(inflight)-1].ID, nil
}

// keyMissingLastError is the last_error of a keyed row whose task the tracker found missing.
const keyMissingLastError = "bunbox relay: the task of this keyed event was missing from Redis (data loss?); enqueued again"

// lookUpKeyed looks up every task of the rows, at most Concurrency at once, and returns each row's
// outcome (archived over missing over waiting; completed only when all its tasks are) with, for an
// archived one, the error to record. Any other error aborts: an unanswered look-up never counts as missing.
func (r *Relay) lookUpKeyed(ctx context.Context, rows []inflightRow) ([]keyOutcome, []string, error) {
	var lookups []taskLookup
	for i, row := range rows {
		lookups = appendTaskLookups(lookups, r.cfg.Routes, i, row.EventID, row.Name)
	}
	states := make([]asynq.TaskState, len(lookups)) // 0: missing
	infos := make([]*asynq.TaskInfo, len(lookups))
	errs := make([]error, len(lookups))
	inspect := func(i int) {
		lk := lookups[i]
		info, err := r.keys.lookUp(rows[lk.row].Queue, lk.taskID)
		switch {
		case err == nil:
			states[i], infos[i] = info.State, info
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			states[i] = 0
		default:
			errs[i] = fmt.Errorf("look up task %s in queue %q: %w", lk.taskID, rows[lk.row].Queue, err)
		}
	}
	var detail []int // the look-ups that need the Inspector
	if r.keys.rdb != nil {
		// One pipelined round trip reads the state of every task; only archived ones are inspected
		// further, for their error.
		pipe := r.keys.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(lookups))
		for i, lk := range lookups {
			cmds[i] = pipe.HGet(ctx, asynqTaskKey(rows[lk.row].Queue, lk.taskID), "state")
		}
		_, _ = pipe.Exec(ctx) // its error is the first command's that failed, Nil included: each is read below
		for i, cmd := range cmds {
			err := cmd.Err()
			switch {
			case errors.Is(err, redis.Nil):
				states[i] = 0 // missing
				continue
			case err != nil:
				// Redis refused or did not answer (a key the ACL forbids, a wrong type, a timeout): an
				// outage of the tracker, never a missing task.
				lk := lookups[i]
				return nil, nil, fmt.Errorf("read the state of task %s in queue %q: %w", lk.taskID, rows[lk.row].Queue, err)
			}
			switch v := cmd.Val(); v {
			case "":
				states[i] = 0 // missing
			case "completed":
				states[i] = asynq.TaskStateCompleted
			case "archived":
				detail = append(detail, i)
			default:
				states[i] = asynq.TaskStatePending // pending, active, scheduled, retry, aggregating: waiting
			}
		}
	} else {
		for i := range lookups {
			detail = append(detail, i)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, r.cfg.Concurrency)
	for _, i := range detail {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, nil, ctx.Err()
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			inspect(i)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	outcomes := make([]keyOutcome, len(rows))
	lastErrs := make([]string, len(rows))
	done := make([]int, len(rows))
	want := make([]int, len(rows))
	for i, lk := range lookups {
		want[lk.row]++
		switch states[i] {
		case asynq.TaskStateCompleted:
			done[lk.row]++
		case asynq.TaskStateArchived:
			if outcomes[lk.row] != keyArchived {
				outcomes[lk.row] = keyArchived
				lastErrs[lk.row] = fmt.Sprintf("asynq archived task %s after %d retries: %s", lk.taskID, infos[i].Retried, infos[i].LastErr)
			}
		case 0:
			if outcomes[lk.row] != keyArchived {
				outcomes[lk.row] = keyMissing
			}
		}
	}
	for i := range rows {
		if outcomes[i] == keyWaiting && done[i] == want[i] {
			outcomes[i] = keyCompleted
		}
	}
	return outcomes, lastErrs, nil
}

// lookUp is GetTaskInfo, except that a queue Redis forgot (it lost its data, and asynq registers a queue
// only at a client's first enqueue into it, so the relay's own re-enqueues do not register it again) is
// registered again and the task looked up once more; without Redis options to do that, it is missing.
func (t *keyTracker) lookUp(queue, id string) (*asynq.TaskInfo, error) {
	info, err := t.ins.GetTaskInfo(queue, id)
	if !errors.Is(err, asynq.ErrQueueNotFound) || t.redis == nil {
		return info, err
	}
	if err := t.register(queue); err != nil {
		return nil, fmt.Errorf("register queue %q again: %w", queue, err)
	}
	return t.ins.GetTaskInfo(queue, id)
}

// registerQueueProbe is the id of the task register enqueues, far in the future, and deletes.
const registerQueueProbe = "bunbox-reconciler-queue-probe"

// register adds queue to the queues asynq's Inspector knows: a fresh client enqueues a probe a century
// ahead, which is deleted at once. At most once a second per queue.
func (t *keyTracker) register(queue string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.registered[queue]) < time.Second {
		return nil
	}
	t.registered[queue] = time.Now()
	c, err := fromRedisOpt(t.redis, asynq.NewClient)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Enqueue(asynq.NewTask("bunbox:relay-probe", nil), asynq.Queue(queue), asynq.TaskID(registerQueueProbe),
		asynq.ProcessAt(time.Now().AddDate(100, 0, 0)), asynq.MaxRetry(0))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return err
	}
	if err := t.ins.DeleteTask(queue, registerQueueProbe); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return err
	}
	return nil
}

// rerunArchived handles a TaskID conflict of a keyed event's task. The task is there; when asynq archived
// it (the operator retried the dead event, see admin.RetryDead), it is deleted and enqueued afresh, with its
// full retry budget. Only the relay that holds the row's claim gets here, so nothing else enqueues it
// meanwhile.
func (r *Relay) rerunArchived(ctx context.Context, task *asynq.Task, opts []asynq.Option) error {
	if r.keys == nil {
		return nil
	}
	var queue, id string
	for _, o := range opts {
		switch o.Type() {
		case asynq.QueueOpt:
			queue = o.Value().(string)
		case asynq.TaskIDOpt:
			id = o.Value().(string)
		}
	}
	info, err := r.keys.lookUp(queue, id)
	if err != nil {
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			err = errors.New("the task vanished")
		}
		return fmt.Errorf("task %s conflicts: %w", id, err) // a later round tries again
	}
	if info.State != asynq.TaskStateArchived {
		return nil // already delivered
	}
	if err := r.keys.ins.DeleteTask(queue, id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return fmt.Errorf("delete archived task %s: %w", id, err)
	}
	_, err = r.enq.EnqueueContext(ctx, task, opts...)
	return err
}

// warnKeyedWithoutInspector logs, at start, that keyed rows wait because the relay cannot track them:
// pending ones, and those waiting in the stream, which hands every keyed row to the per-row path.
func (r *Relay) warnKeyedWithoutInspector(ctx context.Context, db bun.IDB) {
	if r.keys != nil {
		return
	}
	var keyed bool
	if err := db.NewRaw(r.names.SQL(`SELECT EXISTS (SELECT 1 FROM outbox_events
WHERE ordering_key IS NOT NULL AND completed_at IS NULL AND dead_at IS NULL
  AND (published_at IS NULL OR published_at = `+streamsql.Sentinel+`))`)).Scan(ctx, &keyed); err == nil && keyed {
		r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: keyed events are waiting, but this relay relays none: "+
			"give relay.New the Redis options or Config.Inspector")
	}
}
