package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/maintenance/wakeup"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// rowReader reads the per-row path's rows, the exception queue's among them: it claims a round's batch
// (unkeyed rows, the keyed heads, by queue with Config.Queues) and the small batches of the fair-queue
// lane, with the statements of store.Claims. What it reads goes through the rounds' one pipeline (deliver,
// classify, charge, report: round.go).
type rowReader struct {
	cfg    *Config
	claims *store.Claims
	sizer  *claimSizer   // how many rows the next claim asks for, under Config.BatchBytes
	queues *fairQueues   // Config.Queues as the claim uses it (queues.go); nil without
	keyed  bool          // keyed rows are claimed: the relay has an inspector (ordering.go)
	wake   *wakeup.State // told of the rows claimed (internal/maintenance/wakeup)
}

// errMalformedRow marks a claimed row that cannot become a task; the round marks it dead at once.
var errMalformedRow = errors.New("relay: malformed outbox row")

// rowsRead gathers the rows of one read and those that cannot become tasks (see readRow), by index into
// events, which the round marks dead rather than let them block the rows behind them. Every read of rows
// to deliver, the per-row claims and the stream's read alike, goes through read's Kept.
type rowsRead struct {
	events []model.Event
	bad    map[int]error
}

// read is the store.Read that appends to rr's rows within budget bytes and checks each row kept.
func (rr *rowsRead) read(budget int64) store.Read {
	return store.Read{Events: rr.events, Budget: budget, Kept: func(i int, ev *model.Event, metadata []byte) {
		if err := readRow(ev, metadata); err != nil {
			if rr.bad == nil {
				rr.bad = map[int]error{}
			}
			rr.bad[i] = err
		}
	}}
}

// take runs a claim that reads into rr within budget, and keeps its rows.
func (rr *rowsRead) take(budget int64, claim func(store.Read) ([]model.Event, error)) error {
	events, err := claim(rr.read(budget))
	if err != nil {
		return err
	}
	rr.events = events
	return nil
}

// read is the workers' claim: the round's rows within the batch's row and byte budget. On an error it
// returns no rows and sets res.Err, unless ctx ended (a stop, not a failure).
func (c *rowReader) read(ctx context.Context, tx bun.Tx, res *BatchEvent) ([]model.Event, map[int]error) {
	limit := c.sizer.limit(c.cfg.BatchSize, c.cfg.BatchBytes)
	events, bad, err := c.claimRound(ctx, tx, limit)
	if err != nil {
		if ctx.Err() == nil {
			res.Err = fmt.Errorf("claim: %w", err)
		}
		return nil, nil
	}
	res.Claimed = len(events)
	c.wake.Note(events)
	res.full = c.sizer.observe(events, limit, c.cfg.BatchBytes)
	return events, bad
}

// due reports whether a row may be waiting to be claimed; an error says yes, so that the round that
// follows meets it and backs off.
func (c *rowReader) due(ctx context.Context, db bun.IDB) bool {
	due, err := c.claims.Due(ctx, db)
	return err != nil || due || c.dueKeyed(ctx, db)
}

// dueKeyed reports whether a keyed row may be waiting to be claimed; an error says yes.
func (c *rowReader) dueKeyed(ctx context.Context, db bun.IDB) bool {
	if !c.keyed {
		return false
	}
	due, err := c.claims.DueKeyed(ctx, db)
	return err != nil || due
}

// claim locks and reads the next batch of unkeyed rows: up to n rows, and no more than budget bytes of
// payload and metadata unless the first row alone is larger (see store.Budgeted). A row that cannot become
// a task (see readRow) comes back in bad (index into events → error), to be marked dead rather than block
// the rows behind it. windowed picks the claim that cuts at the budget in PostgreSQL.
func claim(ctx context.Context, tx bun.Tx, claims *store.Claims, n int, budget int64, windowed bool) (events []model.Event, bad map[int]error, err error) {
	rr := rowsRead{events: make([]model.Event, 0, n)}
	err = rr.take(budget, func(rd store.Read) ([]model.Event, error) { return claims.Unkeyed(ctx, tx, rd, windowed, n) })
	return rr.events, rr.bad, err
}
