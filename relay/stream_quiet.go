package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The stream's round for quiet queues, with Config.Queues: a backlog in one queue must not delay another.
// A worker's stream round takes the lane due first in the relay's order (stream_lanes.go), but an event
// committed while the workers stream a backlog waits for a round to end: up to streamRoundBatches batches
// of BatchSize rows, Workers rounds at once. So while a round left rows behind in some lane, a goroutine
// of the relay looks every MinPollInterval at the lanes of the named queues that have no backlog (with
// StrictPriority, those above every queue with one) and streams what it finds in rounds of one batch of
// up to min(BatchSize, Concurrency) rows, next to the workers' rounds, as the per-row path's lane does
// (queues_lane.go). Its rounds are stream rounds like any other: a lane's row locked with SKIP LOCKED, no
// row twice.

// quietLanes is what the stream rounds found, by queue: whether the last round of one of its lanes left
// rows behind (came back full).
type quietLanes struct {
	mu      sync.Mutex
	backlog map[string]bool
}

// note records that a round of a lane of queue came back full or not.
func (q *quietLanes) note(queue string, full bool) {
	if queue == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.backlog == nil {
		q.backlog = map[string]bool{}
	}
	if full {
		q.backlog[queue] = true
	} else {
		delete(q.backlog, queue)
	}
}

// serve returns the named queues of fq whose lanes the quiet round serves now: none while no queue has a
// backlog; otherwise the named queues with none (with StrictPriority, above every queue with one).
func (q *quietLanes) serve(fq *fairQueues) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.backlog) == 0 {
		return nil
	}
	above := 0
	if fq.strict {
		for _, s := range fq.named {
			if q.backlog[s.queues[0]] {
				above = max(above, s.weight)
			}
		}
	}
	var queues []string
	for _, s := range fq.named {
		if !q.backlog[s.queues[0]] && (!fq.strict || s.weight > above) {
			queues = append(queues, s.queues[0])
		}
	}
	return queues
}

// streamQuiet runs the quiet queues' stream rounds until ctx is done: while some lane has a backlog, every
// MinPollInterval it asks which lanes have rows due (store.Stream.LanesDue, one statement: an index
// descent or three per lane) and runs a round of each lane of the queues it serves that has. Its errors
// back it off as a worker's do (RoundBackoff).
func (rs *rounds) streamQuiet(ctx context.Context) {
	timer := time.NewTimer(rs.cfg.MinPollInterval)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		wait := rs.cfg.MinPollInterval
		if queues := rs.stream.state.quiet.serve(rs.stream.queues); len(queues) > 0 && rs.stream.streaming(ctx) {
			res := rs.quietRound(ctx, queues)
			switch {
			case ctx.Err() != nil:
				return
			case res.Err != nil:
				failures++
				wait = rs.cfg.roundBackoff(failures)
				rs.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: the stream's round of quiet queues failed, backing off",
					slog.Int("attempt", failures), slog.Duration("delay", wait), slog.Any("err", res.Err))
			case res.full:
				failures, wait = 0, 0 // more may be waiting: look again at once
			default:
				failures = 0
			}
		}
		timer.Reset(wait)
	}
}

// quietRound runs a round of each lane of queues with rows due (see streamQuiet); none when none has.
func (rs *rounds) quietRound(ctx context.Context, queues []string) BatchEvent {
	cs, due, err := rs.stream.st.LanesDue(ctx, rs.db)
	if err != nil {
		if ctx.Err() != nil {
			return BatchEvent{}
		}
		return BatchEvent{Err: fmt.Errorf("stream: look at the quiet queues' lanes: %w", err)}
	}
	var res BatchEvent
	for i, c := range cs {
		if due[i] && slices.Contains(queues, c.Queue) { // a round each: a round works the first lane it locks
			res = addRounds(res, rs.streamRound(ctx, []string{c.Name}))
		}
	}
	return res
}
