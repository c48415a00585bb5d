package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/maintenance/keytrack"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// rounds runs the relay's rounds, the one engine behind every way rows are read: a per-row round
// (runRound: a claim of the workers, or of the fair-queue lane) and a stream round (streamRound) read
// their rows differently and then share one pipeline: deliver (deliverer), classify each row's outcome
// once and charge the failed ones (outcome.go), write the transitions (store.Marks) and report (report,
// record). The relay's workers run its loop and helpers (loop.go).
type rounds struct {
	cfg       *Config
	db        *bun.DB
	log       *slog.Logger
	rows      *rowReader
	stream    *streamReader
	deliverer *deliverer
	marks     *store.Marks
	keys      *keytrack.Tracker // told of the keyed rows published; nil without an inspector
	counters  *counters         // Stats
	health    *roundHealth      // since when the rounds fail, for Ready (health.go)
}

// runOnce claims one batch in a transaction, enqueues it (marking the delivered rows published as it
// goes), marks the failed ones and commits: claim → deliver → settle. The transaction holds the row locks
// while the enqueues run, so no other relay can take the same rows, and a crash releases them: they are
// claimed again and deduplicated by TaskID.
//
// Rows that reached Redis are marked published even when others failed. A failed enqueue counts against
// its row only when the error is the task's own (see taskOwn); otherwise the round fails and the rows are
// released untouched.
func (rs *rounds) runOnce(ctx context.Context) (res BatchEvent) {
	return rs.runRound(ctx, rs.rows.read)
}

// runRound is runOnce with the claim given: the workers' (rowReader.read), or the claim of a fair-queue
// lane (queues_lane.go).
func (rs *rounds) runRound(ctx context.Context,
	claim func(context.Context, bun.Tx, *BatchEvent) ([]model.Event, map[int]error),
) (res BatchEvent) {
	start := rs.cfg.now()
	defer func() {
		res.Duration = rs.cfg.now().Sub(start)
		rs.record(ctx, res)
	}()
	if ctx.Err() != nil {
		return res
	}
	// The transaction must outlive ctx: database/sql rolls back a transaction whose context ends, and the
	// marks of what was enqueued have to be written.
	bg := context.WithoutCancel(ctx)
	// READ COMMITTED whatever the database's default, with the bounds that free the claims of a relay
	// cut off by a partition (session.go).
	bounds := rs.cfg.bounds()
	tx, err := beginBounded(bg, rs.db, bounds)
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
	errs, marked, markErr := rs.deliverMarking(ctx, tx, events, bad)
	stop()
	t := tallyBatch(rs.cfg, events, errs, nil)
	res.Released += len(t.released) // not tried: left untouched, the rollback or commit releases them
	if markErr != nil {
		res.Err = fmt.Errorf("mark published: %w", markErr)
		return res
	}
	t.failOutage(&res) // released untouched
	if marked == 0 && len(t.charges) == 0 {
		return res // nothing to keep: the rollback releases the rows
	}
	if err := rs.marks.Charged(bg, tx, storeCharges(t.charges)); err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("mark failed: %w", err))
		return res
	}
	if err := tx.Commit(); err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("commit: %w", err))
		return res
	}
	res.Published = marked
	rs.report(bg, events, t.charges, &res)
	return res
}

// report reports the rows of a round that committed, whichever way they were read: the keyed rows
// published to the key tracker, and for each charged row the count in res, a log line, and for a dead
// one OnDead.
func (rs *rounds) report(ctx context.Context, events []model.Event, charges []charge, res *BatchEvent) {
	res.Failed += len(charges)
	rs.keys.Published(events)
	for _, c := range charges {
		ev := &events[c.i]
		if !c.Dead {
			rs.log.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: enqueue failed, will retry",
				slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
				slog.String("task_type", ev.Name), slog.Int("attempt", c.Attempts),
				slog.Duration("delay", c.Delay), slog.String("err", c.Err))
			continue
		}
		res.Dead++
		rs.log.LogAttrs(ctx, slog.LevelError, "bunbox relay: event is dead after its last attempt",
			slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
			slog.String("task_type", ev.Name), slog.Int("attempts", c.Attempts), slog.String("err", c.Err))
		if rs.cfg.Observer.OnDead != nil {
			rs.cfg.Observer.OnDead(ctx, DeadEvent{ID: ev.ID, EventID: ev.EventID.String(), EventName: ev.Name,
				Attempts: c.Attempts, Err: c.err})
		}
	}
}

// record counts a round in the relay's Stats and health, and reports it to Observer.OnBatch.
func (rs *rounds) record(ctx context.Context, ev BatchEvent) {
	rs.health.record(ev.Err, rs.cfg.now()) // every round, an empty one too: Ready (health.go)
	if ev.Claimed == 0 && ev.Err == nil {
		return
	}
	c := rs.counters
	c.rounds.Add(1)
	if ev.Err != nil {
		c.failedRounds.Add(1)
	}
	c.published.Add(int64(ev.Published))
	c.failed.Add(int64(ev.Failed))
	c.dead.Add(int64(ev.Dead))
	if rs.cfg.Observer.OnBatch != nil {
		rs.cfg.Observer.OnBatch(ctx, ev)
	}
}
