package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// runOnce claims one batch in a transaction, enqueues it (marking the delivered rows published as it
// goes), marks the failed ones and commits: claim → deliver → settle. The transaction holds the row locks
// while the enqueues run, so no other relay can take the same rows, and a crash releases them: they are
// claimed again and deduplicated by TaskID.
//
// Rows that reached Redis are marked published even when others failed. A failed enqueue counts against
// its row only when the error is the task's own (see taskOwn); otherwise the round fails and the rows are
// released untouched.
func (r *Relay) runOnce(ctx context.Context) (res BatchEvent) {
	return r.runRound(ctx, r.claimBatch)
}

// runRound is runOnce with the claim given: claimBatch, or the claim of a fair-queue lane (queues_lane.go).
func (r *Relay) runRound(ctx context.Context,
	claim func(context.Context, bun.Tx, *BatchEvent) ([]model.Event, map[int]error),
) (res BatchEvent) {
	start := r.cfg.now()
	defer func() {
		res.Duration = r.cfg.now().Sub(start)
		r.record(ctx, res)
	}()
	if ctx.Err() != nil {
		return res
	}
	// The transaction must outlive ctx: database/sql rolls back a transaction whose context ends, and the
	// marks of what was enqueued have to be written.
	bg := context.WithoutCancel(ctx)
	// READ COMMITTED whatever the database's default, with the bounds that free the claims of a relay
	// cut off by a partition (session.go).
	bounds := r.cfg.bounds()
	tx, err := beginBounded(bg, r.db, bounds)
	if err != nil {
		res.Err = fmt.Errorf("begin: %w", err)
		return res
	}
	defer func() { _ = tx.Rollback() }()

	events, bad := claim(ctx, tx, &res)
	if len(events) == 0 {
		return res
	}
	stop := keepAlive(bg, tx, bounds)
	d := r.deliverBatch(ctx, tx, events, bad, &res)
	stop()
	if res.Err != nil {
		return res
	}
	r.settle(bg, tx, events, d, &res)
	return res
}

// claimBatch claims the round's rows within the batch's row and byte budget. On an error it returns no
// rows and sets res.Err, unless ctx ended (a stop, not a failure).
func (r *Relay) claimBatch(ctx context.Context, tx bun.Tx, res *BatchEvent) ([]model.Event, map[int]error) {
	limit := r.sizer.limit(r.cfg.BatchSize, r.cfg.BatchBytes)
	events, bad, err := r.claimRound(ctx, tx, limit)
	if err != nil {
		if ctx.Err() == nil {
			res.Err = fmt.Errorf("claim: %w", err)
		}
		return nil, nil
	}
	res.Claimed = len(events)
	r.wake.Note(events)
	res.full = r.sizer.observe(events, limit, r.cfg.BatchBytes)
	return events, bad
}

// delivery is what deliverBatch learnt about the rows of a batch.
type delivery struct {
	errs   []error // by row: nil when the task reached Redis, errReleased, or why its enqueue failed
	marked int     // rows marked published in the round's transaction
	failed []int   // indexes of the rows whose enqueue failed
}

// deliverBatch enqueues the rows, marking those that reached Redis as it goes, and sorts the outcomes. It
// sets res.Err when the marks could not be written: the round then commits nothing.
func (r *Relay) deliverBatch(ctx context.Context, tx bun.Tx, events []model.Event, bad map[int]error, res *BatchEvent) delivery {
	var d delivery
	var markErr error
	d.errs, d.marked, markErr = r.deliverMarking(ctx, tx, events, bad)
	for i, err := range d.errs {
		switch {
		case err == nil:
		case errors.Is(err, errReleased):
			res.Released++
		default:
			d.failed = append(d.failed, i)
		}
	}
	if markErr != nil {
		res.Err = fmt.Errorf("mark published: %w", markErr)
	}
	return d
}

// failures applies the retry policy to the rows whose enqueue failed for a reason of their own (see
// taskOwn): each is retried later or, after its last attempt (or when it cannot be delivered at all),
// dead. Any other failure is an outage (Redis unreachable, refusing the relay, failing over, ...): no row
// is blamed for it, those rows are released untouched and res.Err makes the relay back off.
func (r *Relay) failures(events []model.Event, d delivery, res *BatchEvent) []failure {
	var fails []failure
	var outage error
	released := 0
	for _, i := range d.failed {
		ev := &events[i]
		if !taskOwn(d.errs[i]) {
			released++
			outage = cmpErr(outage, d.errs[i])
			continue
		}
		n := ev.Attempts + 1
		dead := n >= r.cfg.MaxAttempts || errors.Is(d.errs[i], errMalformedRow)
		f := failure{id: ev.ID, attempts: n, dead: dead, err: truncate(d.errs[i].Error(), 2000)}
		if !f.dead {
			f.delay = r.cfg.retryDelay(n)
		}
		fails = append(fails, f)
	}
	if outage != nil {
		res.Released += released
		res.Err = fmt.Errorf("enqueue: %d rows released, none charged: %w", released, outage)
	}
	return fails
}

// settle writes the failed rows' next attempt (or death), commits the round, and reports: the counts in
// res, a log line per failed row, OnDead per dead one. With nothing to keep it commits nothing and the
// rollback releases the rows.
func (r *Relay) settle(ctx context.Context, tx bun.Tx, events []model.Event, d delivery, res *BatchEvent) {
	fails := r.failures(events, d, res)
	if d.marked == 0 && len(fails) == 0 {
		return
	}
	if err := markFailed(ctx, tx, r.names, fails); err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("mark failed: %w", err))
		return
	}
	if err := tx.Commit(); err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("commit: %w", err))
		return
	}
	res.Published = d.marked
	r.reportSettled(ctx, events, d, fails, res)
}

// reportSettled reports the failed rows of a round that committed (settle, or a stream round): the counts
// in res, a log line per failed row, OnDead per dead one.
func (r *Relay) reportSettled(ctx context.Context, events []model.Event, d delivery, fails []failure, res *BatchEvent) {
	res.Failed = len(fails)
	r.keys.Published(events)
	j := 0 // fails holds the task-own failures of d.failed, in order: the outages between them are skipped
	for _, f := range fails {
		for events[d.failed[j]].ID != f.id {
			j++
		}
		ev := &events[d.failed[j]]
		if !f.dead {
			r.log.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: enqueue failed, will retry",
				slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
				slog.String("task_type", ev.Name), slog.Int("attempt", f.attempts),
				slog.Duration("delay", f.delay), slog.String("err", f.err))
			continue
		}
		res.Dead++
		r.log.LogAttrs(ctx, slog.LevelError, "bunbox relay: event is dead after its last attempt",
			slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
			slog.String("task_type", ev.Name), slog.Int("attempts", f.attempts), slog.String("err", f.err))
		if r.cfg.Observer.OnDead != nil {
			r.cfg.Observer.OnDead(ctx, DeadEvent{ID: ev.ID, EventID: ev.EventID.String(), EventName: ev.Name,
				Attempts: f.attempts, Err: d.errs[d.failed[j]]})
		}
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	// PostgreSQL text takes neither NUL nor invalid UTF-8 (a cut may split a rune).
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "")
}
