package relay

import (
	"context"
	"sync"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// deliverMarking enqueues the events (see deliver) while a goroutine marks the delivered ones published
// on tx, so that the marks overlap the enqueues instead of following them. It returns deliver's errors,
// how many rows were marked, and the marking's error, after which the round must roll back.
func (rs *rounds) deliverMarking(ctx context.Context, tx bun.Tx, events []model.Event, bad map[int]error) (
	errs []error, marked int, err error,
) {
	bg := context.WithoutCancel(ctx) // the marks of what was enqueued have to be written
	delivered := newMarkQueue(len(events))
	var marking sync.WaitGroup
	marking.Go(func() { marked, err = rs.markStream(bg, tx, delivered.chunks) })
	errs = rs.deliverer.deliver(ctx, events, bad, delivered.add)
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
func (rs *rounds) markStream(ctx context.Context, tx bun.Tx, chunks <-chan []int64) (int, error) {
	// The marks need not wait for the WAL flush (store.Marks.Unsynced).
	err := rs.marks.Unsynced(ctx, tx)
	var n int
	for chunk := range chunks {
		if err == nil {
			err = rs.marks.Published(ctx, tx, chunk)
			n += len(chunk)
		}
	}
	return n, err
}
