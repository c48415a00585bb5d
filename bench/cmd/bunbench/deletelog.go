package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/uptrace/bun"
)

// Prototype (b) of issue 18: published rows leave the indexed table. The relay claims rows FOR UPDATE
// SKIP LOCKED as today, and instead of marking a delivered row published (a non-HOT UPDATE that writes a
// new row version and an entry in every index) it deletes it and appends it to a published log without
// indexes, which the reconciler reads by time. The deletes and appends run a chunk at a time while the
// batch is still being enqueued, in the claim's transaction, as relay/mark.go marks.
//
// The reconciler puts a row whose task Redis lost back in line for the relay, so the log has to keep what
// the task is made of (here the payload; bunbox's row also has name, queue, metadata and the delivery
// options): the "full" log. The "slim" log keeps (event id, published_at) only, which is enough to find
// the lost tasks but not to enqueue them again.

var dlTables = []string{
	`CREATE TABLE dl_outbox (
  id       bigserial PRIMARY KEY,
  event_id uuid NOT NULL,
  payload  jsonb NOT NULL
)`,
	`CREATE TABLE dl_published (
  id           bigint NOT NULL,
  event_id     uuid NOT NULL,
  payload      jsonb,
  published_at timestamptz NOT NULL DEFAULT now()
)`,
}

// dlFull and dlSlim are what the delete appends to the log.
const (
	dlFull = `WITH d AS (DELETE FROM %s WHERE id = ANY(?) RETURNING id, event_id, payload)
INSERT INTO dl_published (id, event_id, payload) SELECT id, event_id, payload FROM d`
	dlSlim = `WITH d AS (DELETE FROM %s WHERE id = ANY(?) RETURNING id, event_id)
INSERT INTO dl_published (id, event_id) SELECT id, event_id FROM d`
)

// dlRelay is one replica of the DELETE relay on table, claiming with claimSQL (id, event_id, payload of
// up to 500 rows, locked).
type dlRelay struct {
	db        *bun.DB
	enq       *enqueuer
	claimSQL  string
	deleteSQL string // dlFull or dlSlim with the table
}

func (d *dlRelay) run(ctx context.Context) error {
	for ctx.Err() == nil {
		var got int
		err := d.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			// As bunbox's marks: a delete lost in a crash only means the row is enqueued again.
			if _, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
				return err
			}
			rows, err := scanRows(ctx, tx, d.claimSQL)
			if err != nil || len(rows) == 0 {
				return err
			}
			got = len(rows)
			ids := make(chan int64, len(rows))
			var deleting sync.WaitGroup
			var derr error
			deleting.Go(func() { derr = d.deleteStream(context.WithoutCancel(ctx), tx, ids) })
			err = d.enq.all(ctx, rows, func(id int64) { ids <- id })
			close(ids)
			deleting.Wait()
			return cmpFirst(err, derr)
		})
		if err != nil {
			return err
		}
		if got == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

// deleteStream deletes the rows whose ids arrive on ids and logs them published, 100 at a time.
func (d *dlRelay) deleteStream(ctx context.Context, tx bun.Tx, ids <-chan int64) error {
	var err error
	chunk := make([]int64, 0, markChunkProto)
	flush := func() {
		if err == nil && len(chunk) > 0 {
			_, err = tx.ExecContext(ctx, d.deleteSQL, pgArray(chunk))
		}
		chunk = chunk[:0]
	}
	for id := range ids {
		if chunk = append(chunk, id); len(chunk) == markChunkProto {
			flush()
		}
	}
	flush()
	return err
}

// markChunkProto is relay/mark.go's markChunk.
const markChunkProto = 100

// drainDelete drains the pending-only table dl_outbox with two replicas, logging full rows or slim ones.
func drainDelete(full bool) func(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	return func(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
		db, _, err := e.schema(ctx, 6, false)
		if err != nil {
			return 0, false, err
		}
		if err := execAll(ctx, db, dlTables...); err != nil {
			return 0, false, err
		}
		if err := fillProto(ctx, db, "dl_outbox", n); err != nil {
			return 0, false, err
		}
		del := dlSlim
		if full {
			del = dlFull
		}
		return drainDeleteFrom(ctx, e, db, n, cap, "dl_outbox",
			`SELECT id, event_id, payload FROM dl_outbox ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`, del)
	}
}

// drainDeleteBunbox drains bunbox's own table, with its seven indexes, by DELETE into the full log: the
// rolling-deploy path of design (b), where a relay of today's release marks and one of the next deletes
// in the same table, under the same row locks.
func drainDeleteBunbox(ctx context.Context, e *env, n int, cap time.Duration) (float64, bool, error) {
	db, _, err := e.schema(ctx, 6, true)
	if err != nil {
		return 0, false, err
	}
	if err := execAll(ctx, db, dlTables[1]); err != nil {
		return 0, false, err
	}
	if err := disableStream(ctx, db); err != nil { // its rows pending rows, as the claim reads them
		return 0, false, err
	}
	if err := fillBacklog(ctx, db, "unused", n, false); err != nil {
		return 0, false, err
	}
	return drainDeleteFrom(ctx, e, db, n, cap, "outbox_events", `SELECT id, event_id, payload FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`, dlFull)
}

func drainDeleteFrom(ctx context.Context, e *env, db *bun.DB, n int, cap time.Duration, table, claimSQL, deleteSQL string) (float64, bool, error) {
	q := e.queue("delete")
	defer e.dropQueue(q)
	enq := newEnqueuer(e.redis, q)
	defer enq.close()
	del := fmt.Sprintf(deleteSQL, table)
	return runReplicas(ctx, e, db, q, n, cap, enq, table, func(ctx context.Context) error {
		return (&dlRelay{db: db, enq: enq, claimSQL: claimSQL, deleteSQL: del}).run(ctx)
	})
}
