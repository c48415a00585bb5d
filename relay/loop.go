package relay

import (
	"context"
	"log/slog"
	"time"
)

// loop is the poll loop: wait for the timer or a wake-up, run one round, decide the next wait. It is the
// only worker that polls an idle table; a full batch calls the helpers in (busy).
func (rs *rounds) loop(ctx context.Context, wake <-chan struct{}, busy chan<- struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures, empties := 0, 0
	for {
		wakeCh := wake
		if failures > 0 {
			wakeCh = nil // a wake-up does not cut a backoff short
		}
		woken := false
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wakeCh:
			woken = true
		}
		if empties > 0 && failures == 0 && !woken && (rs.streamCovers() || !rs.rows.due(ctx, rs.db) && !rs.stream.due(ctx)) {
			// Still idle, found with one cheap statement rather than a transaction, or with none while
			// another worker streams (streamCovers).
			empties++
			timer.Reset(rs.cfg.idleWait(empties))
			continue
		}
		res := rs.runRounds(ctx)
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case res.Err != nil:
			failures++
			wait = rs.cfg.roundBackoff(failures)
			rs.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay round failed, backing off",
				slog.Int("attempt", failures), slog.Duration("delay", wait), slog.Any("err", res.Err))
		case failures > 0 && res.streamBusy && res.Claimed == 0:
			// Another worker streams, and this iteration's per-row round found nothing: that is no sign
			// that the outage is over (the streamed rows may still meet it), so the backoff goes on.
			wait = rs.cfg.roundBackoff(failures)
		case failures > 0:
			rs.log.LogAttrs(ctx, slog.LevelInfo, "bunbox relay recovered", slog.Int("failed_rounds", failures))
			failures, empties = 0, 0
		case res.Claimed > 0:
			empties = 0 // more may be waiting: look again at once
			switch {
			case res.full:
				select {
				case busy <- struct{}{}:
				default:
				}
			case res.streamed:
				// The stream is caught up: what commits in the next MinPollInterval is read at once,
				// rather than round after round of a few rows each (see stream.go).
				wait = rs.cfg.MinPollInterval
			}
		default:
			empties++
			wait = rs.cfg.idleWait(empties)
		}
		timer.Reset(wait)
	}
}

// helper is an extra worker: called in by a full batch, it runs rounds while they come back full, so
// that one batch's enqueues overlap another's claim and marks. Errors leave the backoff to loop.
func (rs *rounds) helper(ctx context.Context, busy chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-busy:
		}
		for ctx.Err() == nil {
			res := rs.runRounds(ctx)
			if res.Err != nil || !res.full {
				break
			}
			select {
			case busy <- struct{}{}: // call in the next helper, if any is idle
			default:
			}
		}
	}
}

// runRounds is one iteration of a worker: while the stream is on, a stream round (of a lane no other
// round holds), then the per-row round (runOnce), skipped after a stream round when no per-row row
// is due. Their counts add up; either one's error is the iteration's, and either one coming back full
// calls the helpers in. The stream round goes first: a helper called in by a full one takes the next
// stream round while this worker runs its per-row round.
func (rs *rounds) runRounds(ctx context.Context) BatchEvent {
	var s BatchEvent
	st := rs.stream.state
	if rs.stream.streaming(ctx) {
		st.active.Add(1)
		s = rs.streamRound(ctx, nil)
		st.active.Add(-1)
		s.streamed = true
		if s.full && s.Err == nil { // a failed round leaves the backoff to loop, not to a helper
			rs.callHelper()
		}
	}
	if ctx.Err() != nil {
		return s
	}
	if s.streamed && !rs.rows.due(ctx, rs.db) {
		// Skip the per-row round's transaction (seven statements) when one cheap statement finds no
		// per-row row due (an error says due): under steady traffic with the stream on, every iteration
		// ran it for nothing. A per-row row that comes due meanwhile is claimed in the next iteration,
		// which asks again, as an idle loop's poll does.
		return s
	}
	return addRounds(rs.runOnce(ctx), s)
}

// streamCovers reports whether an idle worker may skip its poll for per-row rows (due) because another
// worker of this relay is in a stream round and the last one handed nothing to the per-row path: that
// worker asks for per-row rows due itself after each round (runRounds), and polling beside it cost two
// statements every MinPollInterval for the whole of a drain.
func (rs *rounds) streamCovers() bool {
	return rs.stream.state.active.Load() > 0 && !rs.stream.state.handedOver.Load()
}

// callHelper calls an idle helper in, if any, to take the next stream round.
func (rs *rounds) callHelper() {
	select {
	case rs.stream.state.busy <- struct{}{}:
	default:
	}
}
