package main

import (
	"context"
	"time"

	"github.com/uptrace/bun"
)

// The lean naive relay: the relay a user writes in an afternoon, on the outbox table they would write
// with it (issue 18's peer to beat). The table has the four columns and one partial index, nothing else;
// the loop locks 500 pending rows FOR UPDATE SKIP LOCKED, enqueues them 32 at a time and marks them
// published in the same transaction, with the server's default synchronous_commit.

var leanTable = []string{
	`CREATE TABLE lean_outbox (
  id           bigserial,
  event_id     uuid NOT NULL,
  payload      jsonb NOT NULL,
  published_at timestamptz
)`,
	`CREATE INDEX lean_outbox_pending_idx ON lean_outbox (id) WHERE published_at IS NULL`,
}

func drainLean(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	db, _, err := e.schema(ctx, 4, false)
	if err != nil {
		return 0, false, err
	}
	if err := execAll(ctx, db, leanTable...); err != nil {
		return 0, false, err
	}
	if err := fillProto(ctx, db, "lean_outbox", n); err != nil {
		return 0, false, err
	}
	q := e.queue("lean")
	defer e.dropQueue(q)
	enq := newEnqueuer(e.redis, q)
	defer enq.close()
	if err := e.cur.begin(ctx); err != nil {
		return 0, false, err
	}
	start := time.Now()
	for enq.sent.Load() < int64(n) && time.Since(start) < cap {
		var got int
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			rows, err := scanRows(ctx, tx, `SELECT id, event_id, payload FROM lean_outbox WHERE published_at IS NULL
ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`)
			if err != nil || len(rows) == 0 {
				return err
			}
			got = len(rows)
			ids := make(chan int64, len(rows))
			if err := enq.all(ctx, rows, func(id int64) { ids <- id }); err != nil {
				return err
			}
			close(ids)
			done := make([]int64, 0, len(rows))
			for id := range ids {
				done = append(done, id)
			}
			_, err = tx.ExecContext(ctx, "UPDATE lean_outbox SET published_at = now() WHERE id = ANY(?)", pgArray(done))
			return err
		})
		if err != nil {
			return 0, false, err
		}
		if got == 0 {
			break
		}
	}
	el := time.Since(start)
	if err := e.cur.end(ctx); err != nil {
		return 0, false, err
	}
	sent := enq.sent.Load()
	if sent >= int64(n) {
		if err := checkDelivered(e, q, n, enq.dups.Load()); err != nil {
			return 0, false, err
		}
	}
	return float64(sent) / el.Seconds(), sent < int64(n), e.cur.vacuumAfter(ctx, db, "lean_outbox")
}
