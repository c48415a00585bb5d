package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/taskmap"
)

// cursor is what a Reconciler remembers between passes, in memory: a new Reconciler sweeps.
//
// Why a pass may skip the rows published before horizon: a marker of the previous pass that is still in
// Redis proves that every write Redis took before it is still there (Redis keeps or loses writes in
// order). A task lost since then was written after that marker, which was written after that pass read
// its horizon; the relay's round that enqueued the task stamps its rows with its transaction's start
// (published_at = now()), and that transaction was either open when the horizon was read (so it began
// at or after the horizon, the earliest start of the transactions open then) or began later. Either way
// the row's published_at is at or after the horizon, so the next pass reads it.
type cursor struct {
	instance string // in this reconciler's marker keys
	pass     uint64 // the value of the markers of the current pass

	// horizon is where the incremental scan of the next pass begins: the horizon read by the last pass that
	// completed. Zero until a pass has completed: then the pass sweeps.
	horizon time.Time
	// streamSince is what the last pass that completed read of the stream's cursors, before it wrote its
	// markers: the streamed rows delivered since are not visible in what it read (see stream.go).
	streamSince streamSince
	// xidMarks are the marks of the passes within the window, and the latest before it (see xidMark).
	xidMarks []xidMark
	// markers holds, per queue, the marker value the reconciler last wrote there; a queue of lastSeen
	// without one (a write that failed) counts as lost.
	markers map[string]uint64
	// lastSeen is, per queue, the latest published_at or process_at of its rows the reconciler read: a
	// queue whose rows all left the window is forgotten, and its marker expires.
	lastSeen map[string]time.Time
	// written holds the queues whose marker the current pass wrote.
	written map[string]bool
	// sweepAll and sweep are the sweeps owed: set by Sweep and by lost markers, cleared when one is done.
	sweepAll bool
	sweep    map[string]bool
	// hiddenSince holds, per transaction of another role open at the last read ("pid/vxid", see
	// holdForHidden), the earliest time it may have begun; zero when unknown. lastRead is when that read
	// began; zero before the first.
	hiddenSince map[string]time.Time
	lastRead    time.Time
	// blindLogged records that the reconciler has said that its role cannot see other roles' transactions.
	blindLogged bool
	// marksLogged records that the reconciler has said that it cannot use bunbox_stream_marks.
	marksLogged bool
}

func newCursor() cursor {
	return cursor{instance: uuid.NewString(), markers: map[string]uint64{}, lastSeen: map[string]time.Time{},
		written: map[string]bool{}, sweep: map[string]bool{}, hiddenSince: map[string]time.Time{}}
}

// hiddenStartMargin covers the moment between a backend reading the clock for its transaction's start
// (now()) and taking the lock on its virtual transaction id, in which a read of pg_locks cannot see the
// transaction yet: both are steps of one backend starting a transaction (microseconds apart), so a
// transaction first listed by one read began after the previous read minus this margin.
const hiddenStartMargin = 10 * time.Second

// holdForHidden returns the horizon held back for the transactions of other roles that the read listed
// (hidden: "pid/vxid") and whose start the role cannot read. A transaction the previous read did not list
// began after that read began (readAt, less hiddenStartMargin); one listed by every read since this
// Reconciler's first has an unknown start, and then the horizon is from (the start of the window: the next
// pass reads every row published within Window, as a sweep does). Rows published by a transaction open
// for longer than Window are not checked, as with the privilege. The bounds of the transactions still
// open are kept for the next pass.
func (c *cursor) holdForHidden(horizon, readAt, from time.Time, hidden []string) time.Time {
	next := make(map[string]time.Time, len(hidden))
	for _, id := range hidden {
		bound, known := c.hiddenSince[id]
		if !known && !c.lastRead.IsZero() {
			bound = c.lastRead.Add(-hiddenStartMargin)
		}
		next[id] = bound // zero: unknown
		if bound.IsZero() {
			bound = from
		}
		if bound.Before(horizon) {
			horizon = bound
		}
	}
	c.hiddenSince = next
	c.lastRead = readAt
	return horizon
}

// begin starts a pass: a new marker value, and the queues whose rows all left the window forgotten.
func (c *cursor) begin(from time.Time) {
	c.pass++
	clear(c.written)
	for q, at := range c.lastSeen {
		if at.Before(from) {
			delete(c.lastSeen, q)
			delete(c.markers, q)
			delete(c.sweep, q)
		}
	}
}

func (c *cursor) knownQueues() []string { return slices.Sorted(maps.Keys(c.lastSeen)) }

func (c *cursor) sweepQueues() []string { return slices.Sorted(maps.Keys(c.sweep)) }

// seen records the queues of rows read.
func (c *cursor) seen(rows []store.ReconcileRow) {
	for i := range rows {
		t := rows[i].PublishedAt
		if p := rows[i].ProcessAt; p != nil && p.After(t) {
			t = *p
		}
		if at, ok := c.lastSeen[rows[i].Queue]; !ok || t.After(at) {
			c.lastSeen[rows[i].Queue] = t
		}
	}
}

// markerKey is the key of this reconciler's marker in queue's hash slot: asynq keeps a queue's keys
// under "asynq:{<queue>}:", so on a Cluster the marker lives on the node of the queue's tasks.
func (c *cursor) markerKey(queue string) string {
	return "bunbox:reconciler:{" + queue + "}:" + c.instance
}

// writeMarkers writes the current pass's marker into each queue not written yet in this pass, one
// pipeline for all, and returns the queues of which the reconciler knew a marker that Redis no longer
// had (or had with another value). It also registers each queue in asynq's set of queues, as an asynq
// Client does at its first enqueue into a queue: after Redis lost its data, a relay that kept running
// re-creates tasks without registering their queue again, and asynq's Inspector does not find a task of
// a queue it does not know.
func (r *Reconciler) writeMarkers(ctx context.Context, queues []string) (lost []string, _ error) {
	c := &r.cursor
	queues = slices.DeleteFunc(slices.Clone(queues), func(q string) bool { return c.written[q] })
	if len(queues) == 0 {
		return nil, nil
	}
	ttl := r.cfg.Window + 2*r.cfg.Interval
	value := strconv.FormatUint(c.pass, 10)
	pipe := r.cfg.Redis.Pipeline()
	sets := make([]*redis.Cmd, len(queues))
	for i, q := range queues {
		// SET ... GET (Redis 6.2, which asynq's scripts need too) writes and reads back in one command.
		sets[i] = pipe.Do(ctx, "set", c.markerKey(q), value, "px", ttl.Milliseconds(), "get")
		pipe.SAdd(ctx, taskmap.QueuesKey, q)
	}
	_, _ = pipe.Exec(ctx) // the errors are in the commands
	var errs []error
	for i, q := range queues {
		old, err := sets[i].Text()
		if err != nil && !errors.Is(err, redis.Nil) {
			// Written or not, its value is unknown now: the next pass sweeps the queue.
			delete(c.markers, q)
			errs = append(errs, fmt.Errorf("relay: reconciler: Redis: write the marker of queue %q: %w", q, err))
			continue
		}
		if want, known := c.markers[q]; known && old != strconv.FormatUint(want, 10) || !known && c.lastSeen[q] != (time.Time{}) {
			lost = append(lost, q)
		}
		c.markers[q] = c.pass
		c.written[q] = true
	}
	return lost, errors.Join(errs...)
}
