package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"
)

// The pieces the lean naive relay and the prototypes of issue 18 share: a row as they read it, the asynq
// client with 32 enqueues in flight over every relay loop of one arm, and the fill and check of a backlog.

// protoRow is one outbox row as a prototype relay reads it.
type protoRow struct {
	id      int64
	eventID uuid.UUID
	payload []byte
}

// enqueuer enqueues rows' tasks into one asynq queue, at most drainConcurrency at once over every loop
// that shares it, and counts what reached Redis.
type enqueuer struct {
	client *asynq.Client
	queue  string
	sem    chan struct{}
	sent   atomic.Int64 // tasks asynq took
	dups   atomic.Int64 // tasks asynq already had (asynq.ErrTaskIDConflict): a second delivery of a row
}

func newEnqueuer(redis asynq.RedisClientOpt, queue string) *enqueuer {
	return &enqueuer{client: asynq.NewClient(redis), queue: queue, sem: make(chan struct{}, drainConcurrency)}
}

func (q *enqueuer) close() { _ = q.client.Close() }

// one enqueues row's task, the same task as every drain arm's (benchTaskOf, with the row's payload).
func (q *enqueuer) one(ctx context.Context, row protoRow) error {
	select {
	case q.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-q.sem }()
	task, opts := benchTaskOf(row.eventID, q.queue, row.payload)
	_, err := q.client.EnqueueContext(ctx, task, opts...)
	switch {
	case err == nil:
		q.sent.Add(1)
	case errors.Is(err, asynq.ErrTaskIDConflict):
		q.dups.Add(1)
		err = nil
	}
	return err
}

// all enqueues rows, each from a goroutine of its own, and calls delivered with the id of each row that
// reached Redis as it does; it returns the first error.
func (q *enqueuer) all(ctx context.Context, rows []protoRow, delivered func(id int64)) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, row := range rows {
		wg.Go(func() {
			if err := q.one(ctx, row); err != nil {
				once.Do(func() { first = err })
				return
			}
			delivered(row.id)
		})
	}
	wg.Wait()
	return first
}

// scanRows reads id, event_id, payload rows.
func scanRows(ctx context.Context, db bun.IDB, query string, args ...any) ([]protoRow, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []protoRow
	for rows.Next() {
		var r protoRow
		if err := rows.Scan(&r.id, &r.eventID, &r.payload); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// execAll runs statements one by one.
func execAll(ctx context.Context, db bun.IDB, stmts ...string) error {
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// fillProto writes a backlog of n events into table (which has event_id and payload columns and fills the
// rest by default) in transactions of 1,000 rows, then VACUUM ANALYZE and a CHECKPOINT, as fillBacklog does.
func fillProto(ctx context.Context, db *bun.DB, table string, n int) error {
	for done := 0; done < n; done += 1000 {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+table+` (event_id, payload)
SELECT gen_random_uuid(), ? FROM generate_series(1, ?)`, string(drainPayload), min(1000, n-done)); err != nil {
			return err
		}
	}
	return vacuumAndCheckpoint(ctx, db, table)
}

// checkDelivered fails unless queue q holds exactly n tasks and no row was enqueued twice: every row of
// the backlog once.
func checkDelivered(e *env, q string, n int, dups int64) error {
	info, err := e.ins.GetQueueInfo(q)
	if err != nil {
		return err
	}
	if info.Size != n || dups != 0 {
		return fmt.Errorf("queue %s holds %d tasks for %d rows, %d rows enqueued twice", q, info.Size, n, dups)
	}
	return nil
}
