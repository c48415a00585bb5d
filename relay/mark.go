package relay

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// deliverMarking enqueues the events (see deliver) while a goroutine marks the delivered ones published
// on tx, so that the marks overlap the enqueues instead of following them. It returns deliver's errors,
// how many rows were marked, and the marking's error, after which the round must roll back.
func (r *Relay) deliverMarking(ctx context.Context, tx bun.Tx, events []model.Event, bad map[int]error) (
	errs []error, marked int, err error,
) {
	bg := context.WithoutCancel(ctx) // the marks of what was enqueued have to be written
	delivered := newMarkQueue(len(events))
	var marking sync.WaitGroup
	marking.Go(func() { marked, err = r.markStream(bg, tx, delivered.chunks) })
	errs = r.deliver(ctx, events, bad, delivered.add)
	delivered.close()
	marking.Wait()
	return errs, marked, err
}

// markChunk is how many delivered rows markStream marks per statement.
const markChunk = 100

// markQueue gathers the ids of the rows that reached Redis into chunks of markChunk for markStream: the
// marking goroutine is handed a chunk at a time, rather than woken for every row (a goroutine hand-off per
// event was a visible share of the relay's CPU in the drain's profile).
type markQueue struct {
	mu     sync.Mutex
	chunk  []int64
	chunks chan []int64 // holds every chunk of the batch: add never waits for the marks
}

// newMarkQueue makes the queue of a batch of n rows.
func newMarkQueue(n int) *markQueue {
	return &markQueue{chunk: make([]int64, 0, min(n, markChunk)), chunks: make(chan []int64, n/markChunk+1)}
}

// add queues id; a full chunk goes to the marks.
func (q *markQueue) add(id int64) {
	q.mu.Lock()
	q.chunk = append(q.chunk, id)
	var full []int64
	if len(q.chunk) == markChunk {
		full, q.chunk = q.chunk, make([]int64, 0, markChunk)
	}
	q.mu.Unlock()
	if full != nil {
		q.chunks <- full
	}
}

// close sends the last chunk, after the last add.
func (q *markQueue) close() {
	if len(q.chunk) > 0 {
		q.chunks <- q.chunk
	}
	close(q.chunks)
}

// markStream marks the rows of the chunks of ids as published, each as it arrives while the rest of the
// batch is still being enqueued, until chunks is closed, and returns how many rows it marked. After an
// error it drains chunks and marks nothing more: the round rolls back.
func (r *Relay) markStream(ctx context.Context, tx bun.Tx, chunks <-chan []int64) (int, error) {
	// The marks need not wait for the WAL flush: a mark lost in a database crash only means the row is
	// enqueued again, which its TaskID absorbs. This takes the fsync off the relay's critical path.
	_, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = off")
	var n int
	for chunk := range chunks {
		if err == nil {
			err = r.markPublished(ctx, tx, chunk)
			n += len(chunk)
		}
	}
	return n, err
}

// markPublishedSQL marks the rows whose ids are in its one argument, an array, published.
const markPublishedSQL = `UPDATE outbox_events SET published_at = now(), next_attempt_at = NULL
WHERE id = ANY(?)`

// markPublished runs markPublishedSQL, prepared where it can (see prepared).
func (r *Relay) markPublished(ctx context.Context, tx bun.Tx, ids []int64) error {
	stmt := r.stmts.mark.in(ctx, tx)
	if stmt == nil {
		_, err := tx.NewRaw(r.names.SQL(markPublishedSQL), pgdialect.Array(ids)).Exec(ctx)
		return err
	}
	_, err := stmt.ExecContext(ctx, int64Array(ids))
	r.stmts.mark.failed(err)
	return err
}

// int64Array is ids as PostgreSQL's text form of an array, {1,2,3}.
func int64Array(ids []int64) string {
	b := make([]byte, 0, 2+len(ids)*8)
	b = append(b, '{')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, '}'))
}

// failure is one row whose enqueue failed.
type failure struct {
	id       int64
	attempts int // including this one
	delay    time.Duration
	dead     bool
	err      string
}

func markFailed(ctx context.Context, tx bun.Tx, names tables.Names, fs []failure) error {
	if len(fs) == 0 {
		return nil
	}
	ids := make([]int64, len(fs))
	attempts := make([]int64, len(fs))
	delays := make([]int64, len(fs))
	dead := make([]bool, len(fs))
	errs := make([]string, len(fs))
	for i, f := range fs {
		ids[i], attempts[i], delays[i], dead[i], errs[i] = f.id, int64(f.attempts), f.delay.Microseconds(), f.dead, f.err
	}
	_, err := tx.NewRaw(names.SQL(`UPDATE outbox_events AS o SET
  attempts = f.attempts,
  last_error = f.err,
  next_attempt_at = CASE WHEN f.dead THEN NULL ELSE now() + f.delay * interval '1 microsecond' END,
  dead_at = CASE WHEN f.dead THEN now() END
FROM unnest(?::bigint[], ?::int[], ?::bigint[], ?::boolean[], ?::text[]) AS f(id, attempts, delay, dead, err)
WHERE o.id = f.id`),
		pgdialect.Array(ids), pgdialect.Array(attempts), pgdialect.Array(delays), pgdialect.Array(dead),
		pgdialect.Array(errs)).Exec(ctx)
	return err
}
