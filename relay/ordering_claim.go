package relay

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// holdKeys makes the keyed rows of a claim (events, bad: see rowsRead) safe to enqueue, and gives back
// those that are. For each of their keys it takes a transaction-level advisory lock, which the round
// holds until it commits, and so until the key's row it relays is marked published for all to see
// (store.Claims.HoldKeys). A key whose lock another round holds, or that has a row in flight once the
// locks are held, has another row in hand: its claimed row is left out, not tried and not charged, and
// stays locked until the round ends.
func (c *rowReader) holdKeys(ctx context.Context, tx bun.Tx, events []model.Event, bad map[int]error) ([]model.Event, map[int]error, error) {
	var keys []string
	for i := range events {
		if events[i].OrderingKey != "" {
			keys = append(keys, events[i].OrderingKey)
		}
	}
	if len(keys) == 0 {
		return events, bad, nil
	}
	busy, err := c.claims.HoldKeys(ctx, tx, keys)
	if err != nil {
		return nil, nil, err
	}
	if len(busy) == 0 {
		return events, bad, nil
	}
	kept := events[:0]
	var keptBad map[int]error
	for i := range events {
		if busy[events[i].OrderingKey] {
			continue
		}
		if err := bad[i]; err != nil {
			if keptBad == nil {
				keptBad = map[int]error{}
			}
			keptBad[len(kept)] = err
		}
		kept = append(kept, events[i])
	}
	return kept, keptBad, nil
}

// claimRound locks the batch of a round, at most n rows within Config.BatchBytes (fewer on the first claim
// of a relay when its rows are large, see claimSizer.sample): the keyed heads first,
// at most half the rows so that unkeyed rows always have room, then unkeyed rows to fill it with what is
// left of the rows and the bytes (by queue with Config.Queues, see claimUnkeyed). Without an inspector
// (see Config.Inspector) keyed rows are left alone.
func (c *rowReader) claimRound(ctx context.Context, tx bun.Tx, n int) ([]model.Event, map[int]error, error) {
	budget := c.cfg.BatchBytes
	first := c.sizer.meanRow.Load() <= 0
	if first {
		// The first claim: sized from the rows at the head of the line, not BatchSize of them, and cut
		// at the budget in PostgreSQL, as before the sample.
		if err := c.sizer.sample(ctx, tx, c.claims); err != nil {
			return nil, nil, err
		}
		n = c.sizer.limit(n, budget)
	}
	windowed := first || c.sizer.windowed(n, budget)
	rr := rowsRead{events: make([]model.Event, 0, n)}
	if !c.keyed {
		return c.claimUnkeyed(ctx, tx, rr, n, budget, windowed)
	}
	err := rr.take(budget, func(rd store.Read) ([]model.Event, error) {
		return c.claims.Keyed(ctx, tx, rd, windowed, max(1, n/2))
	})
	events, bad := rr.events, rr.bad
	if err == nil {
		events, bad, err = c.holdKeys(ctx, tx, events, bad)
	}
	if err != nil || len(events) == n {
		return events, bad, err
	}
	left := budget - claimedBytes(events)
	if len(events) > 0 && left <= 0 {
		return events, bad, nil
	}
	return c.claimUnkeyed(ctx, tx, rowsRead{events: events, bad: bad}, n-len(events), max(left, 1), windowed)
}
