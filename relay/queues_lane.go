package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// The lane of Config.Queues: a backlog in one queue must not delay another. The workers' rounds claim
// by weight, but a row committed while they drain a backlog waits for the next claim, after the rounds
// in flight: a round of BatchSize rows of the backlog, Workers of them at once. The lane is a round of
// its own for the named queues that have no backlog: while the workers' claims leave rows behind in some
// queue, it looks every MinPollInterval for new rows in the others (one index descent per queue) and
// claims and enqueues them in small rounds next to the workers', so that a critical event committed
// behind 100,000 bulk ones is enqueued within a few milliseconds rather than after a bulk round.
//
// The lane's rounds are the workers' (runRound: the same transaction, SKIP LOCKED claim, enqueues
// within Concurrency, marks, retries and deaths), on the same (queue, id) index, so no row is claimed
// twice and a lane round that fails releases its rows to the next round like any other. Keyed events and
// the queues not named are the workers' alone. A queue whose rows the workers' claims do not finish (a
// backlog of its own) is left to them, and their weights: the lane serves only queues that are quiet.
// With StrictPriority it serves only the quiet queues above every queue with a backlog.

// laneState is what the workers' claims found, for the lane.
type laneState struct {
	mu      sync.Mutex
	backlog map[string]bool // by named queue: the last claim that reached it left rows behind
	busy    bool            // the last claim by queue left rows behind in some share
	queues  []string        // the quiet named queues the lane serves while busy
	kick    chan struct{}   // wakes an idle lane when busy turns true
}

// note records a workers' claim by queue: which shares it reached and which of them it left rows in.
func (l *laneState) note(fq *fairQueues, shares []queueShare, reached, full []bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wasBusy := l.busy
	l.busy = false
	for i, s := range shares {
		if reached[i] && full[i] {
			l.busy = true
		}
		if len(s.queues) == 1 && i < len(fq.named) && reached[i] { // a named queue, not the rest
			l.backlog[s.queues[0]] = full[i]
		}
	}
	if !l.busy {
		l.queues = l.queues[:0]
		return
	}
	above := 0 // with StrictPriority, the weight a queue must be above to be served
	if fq.strict {
		for _, s := range fq.named {
			if l.backlog[s.queues[0]] {
				above = max(above, s.weight)
			}
		}
	}
	l.queues = l.queues[:0]
	for _, s := range fq.named {
		if !l.backlog[s.queues[0]] && (!fq.strict || s.weight > above) {
			l.queues = append(l.queues, s.queues[0])
		}
	}
	if !wasBusy {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// serve returns the queues the lane serves now (a copy), and whether the workers are busy with a backlog.
func (l *laneState) serve() ([]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.queues), l.busy
}

// laneBatch is how many rows a lane round claims at most: one wave of enqueues.
func (c *rowReader) laneBatch() int { return min(c.cfg.BatchSize, c.cfg.Concurrency) }

// lane runs the lane until ctx is done: idle while the workers have no backlog, and otherwise, every
// MinPollInterval, a look for rows in the quiet queues newer than the last it saw, and rounds of them
// while it finds some. Its errors back it off as a worker's do (RoundBackoff); the workers log them.
func (rs *rounds) lane(ctx context.Context) {
	l := &rs.rows.queues.lane
	timer := time.NewTimer(0)
	defer timer.Stop()
	var seen int64 // the highest id the lane looked at: rows up to it were claimed, or held by a round
	failures := 0
	for {
		queues, busy := l.serve()
		if busy || failures > 0 {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case <-l.kick:
				continue // look at the queues the claim that kicked noted
			}
		}
		wait := rs.cfg.MinPollInterval
		if len(queues) == 0 {
			failures = 0
		} else {
			top, res := rs.laneRound(ctx, queues, seen)
			switch {
			case ctx.Err() != nil:
				return
			case res.Err != nil:
				failures++
				wait = rs.cfg.roundBackoff(failures)
				rs.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: fair-queue lane round failed, backing off",
					slog.Int("attempt", failures), slog.Duration("delay", wait), slog.Any("err", res.Err))
			case res.full:
				failures, wait = 0, 0 // more may be waiting, up to top and past it: look again at once
			default:
				failures, seen = 0, top
			}
		}
		timer.Reset(wait)
	}
}

// laneRound looks for rows in queues newer than seen and, when there are, runs one lane round for them.
// It returns the highest id it found pending (seen when it found nothing new), and the round's outcome
// (none when it ran no round). A round that claimed fewer rows than were pending found the others held by
// another round, which delivers or releases them: the lane need not look at them again.
func (rs *rounds) laneRound(ctx context.Context, queues []string, seen int64) (int64, BatchEvent) {
	top, err := rs.rows.claims.LaneTop(ctx, rs.db, queues)
	if err != nil {
		if ctx.Err() != nil {
			return seen, BatchEvent{}
		}
		return seen, BatchEvent{Err: fmt.Errorf("fair-queue lane: look for rows: %w", err)}
	}
	if top <= seen {
		return seen, BatchEvent{} // nothing new: what is pending was claimed, or a round holds it
	}
	return top, rs.runRound(ctx, func(ctx context.Context, tx bun.Tx, res *BatchEvent) ([]model.Event, map[int]error) {
		return rs.rows.laneClaim(ctx, tx, queues, res)
	})
}

// laneClaim claims up to laneBatch rows of queues, in id order, within BatchBytes.
func (c *rowReader) laneClaim(ctx context.Context, tx bun.Tx, queues []string, res *BatchEvent) ([]model.Event, map[int]error) {
	n, budget := c.laneBatch(), c.cfg.BatchBytes
	windowed := c.sizer.windowed(n, budget)
	rr := rowsRead{events: make([]model.Event, 0, n)}
	err := rr.take(budget, func(rd store.Read) ([]model.Event, error) {
		return c.claims.Queue(ctx, tx, rd, windowed, queues, 0, n)
	})
	events, bad := rr.events, rr.bad
	if err != nil {
		if ctx.Err() == nil {
			res.Err = fmt.Errorf("fair-queue lane: claim: %w", err)
		}
		return nil, nil
	}
	res.Claimed = len(events)
	res.full = len(events) >= n
	return events, bad
}
