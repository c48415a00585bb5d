package relay

import (
	"cmp"
	"context"
	"errors"

	"github.com/uptrace/bun"
)

// streamRoundBatches bounds the batches one stream round reads and enqueues before it moves the cursor and
// commits. More batches per round keep the enqueues going while the next batch is read (readAhead) and
// spread the round's fixed statements (the cursor's lock, its move, the commit) over more rows; fewer
// bound what a round that dies before its commit leaves to be enqueued again (up to this many batches,
// which their TaskIDs absorb) and how long a round holds the cursor row (a few tens of milliseconds at
// the default BatchSize, which EnableStream, DisableStream and the other relays' SKIP LOCKED do not wait
// on past their own bounds). Past four, the commit's share of a round is small and a crash's re-enqueues
// keep growing.
const streamRoundBatches = 4

// streamBatch is one read of a stream round and its enqueues, which run while the round reads the next.
type streamBatch struct {
	read streamRead
	errs []error       // by row, once done is closed: deliver's outcome, or why the row was not enqueued
	done chan struct{} // closed when every row of the batch was tried (or released)
}

// startBatch starts the enqueues of read's rows: every row but the cancelled ones (never enqueued) and
// the keyed ones (handed to the per-row path), through deliver, under the relay's Concurrency bound.
func (sr *streamReader) startBatch(ctx context.Context, read streamRead) *streamBatch {
	skip := read.bad
	for i := range read.events {
		var why error
		switch _, cancelled := read.cancelled[i]; {
		case cancelled:
			why = errCancelled
		case read.events[i].OrderingKey != "" && skip[i] == nil:
			why = errHandOver
		default:
			continue
		}
		if skip == nil {
			skip = map[int]error{}
		}
		skip[i] = why
	}
	b := &streamBatch{read: read, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.errs = sr.deliverer.deliver(ctx, read.events, skip, func(int64) {})
	}()
	return b
}

// drop lets go of the payloads and metadata of a batch whose enqueues are done: the round keeps only what
// it settles and reports by, so that it holds about two batches' bytes at once however many it reads.
func (b *streamBatch) drop() {
	for i := range b.read.events {
		ev := &b.read.events[i]
		ev.Payload, ev.PayloadEncoded, ev.Metadata = nil, nil, nil
	}
}

// outage reports whether an enqueue of the done batch met an outage (see classify).
func (b *streamBatch) outage() bool { return anyOutage(b.errs) }

// streamPass is what a stream round read and tried: its batches, in the order read.
type streamPass struct {
	batches []*streamBatch // each one done
	full    bool           // more rows of the pair may follow the last one read
	readErr error          // a read after the first failed: the round's transaction cannot commit
}

// rows is how many rows the pass read.
func (p *streamPass) rows() int {
	n := 0
	for _, b := range p.batches {
		n += len(b.read.events)
	}
	return n
}

// readAhead enqueues the rows of first, the round's first read, and reads the pair's next batches while
// the enqueues of those before run: the read of batch k+1 on tx overlaps the enqueues of batch k (they use
// Redis only), and the enqueues of batch k+1 start at once, beside batch k's last ones, under the same
// Concurrency bound, so that the window of enqueues stays full across the batches. It reads up to
// streamRoundBatches batches, and stops early at the end of the pair, at a stop (ctx), after a read that
// failed, or after a batch that met an outage. It holds at most two batches' rows at once: it reads batch
// k+2 once the enqueues of batch k are done. It returns once every enqueue it started is done.
//
// The reads after the first run with ctx's values but not its cancellation: a read cancelled by a stop
// would end the round's transaction, and the rows enqueued before it must be settled. keepAlive runs only
// while no read does: database/sql would send its statement on tx's connection while the read's rows are
// still coming.
func (sr *streamReader) readAhead(ctx context.Context, tx bun.Tx, bounds sessionBounds, cur streamCursor, first streamRead, small bool) streamPass {
	bg := context.WithoutCancel(ctx)
	batches := []*streamBatch{sr.startBatch(ctx, first)}
	full, readErr := first.full, error(nil)
	most := cmp.Or(sr.state.batches, streamRoundBatches)
	if small {
		most = 1
	}
	stop := keepAlive(bg, tx, bounds)
	for k := 1; k < most && full && ctx.Err() == nil; k++ {
		if k >= 2 {
			before := batches[k-2]
			<-before.done
			before.drop()
			if before.outage() {
				break // the round ends at that batch or before: reading more only adds rows to enqueue again
			}
		}
		if sr.state.reading != nil {
			sr.state.reading(k)
		}
		if ctx.Err() != nil {
			break
		}
		cur = past(cur, batches[k-1].read)
		stop()
		read, err := sr.readBatch(bg, tx, cur, false)
		stop = keepAlive(bg, tx, bounds)
		if err != nil {
			readErr = err
			break
		}
		full = read.full
		if len(read.events) == 0 {
			break
		}
		batches = append(batches, sr.startBatch(ctx, read))
	}
	for _, b := range batches {
		<-b.done
	}
	stop()
	return streamPass{batches: batches, full: full, readErr: readErr}
}

// settled returns how many rows of the pass the round settles, which the cursor moves past: every row up to
// the last one tried (a stop releases the rows not yet tried, and the enqueues run in parallel, so rows
// released by a stop can lie before rows that reached Redis: those are handed to the per-row path, see
// settleBatch, and the cursor still moves past every row that reached Redis, which a later round would
// otherwise enqueue again), and before the first batch whose enqueues Redis took none of for an outage,
// whose outage it returns. The rows from there on stay in the stream, for the round after the relay's
// backoff, as they would in a round of that batch alone.
func (p *streamPass) settled() (cut int, outage error) {
	cut, start := 0, 0
	for _, b := range p.batches {
		for i, err := range b.errs {
			if !errors.Is(err, errReleased) {
				cut = start + i + 1
			}
		}
		start += len(b.errs)
	}
	start = 0
	for _, b := range p.batches {
		if start >= cut {
			break
		}
		if err := outageOnly(b.errs[:min(len(b.errs), cut-start)]); err != nil {
			return start, err
		}
		start += len(b.errs)
	}
	return cut, nil
}

// readBatch reads the next batch of c's pair (read) within the sizer's limit and BatchBytes (small: and
// one wave of enqueues, for a quiet queue's round, stream_quiet.go), and records it (the wake-up's claimed
// rows, the sizer's mean row).
func (sr *streamReader) readBatch(ctx context.Context, tx bun.Tx, c streamCursor, small bool) (streamRead, error) {
	limit := sr.state.sizer.limit(sr.cfg.BatchSize, sr.cfg.BatchBytes)
	if small {
		limit = min(limit, sr.cfg.BatchSize, sr.cfg.Concurrency)
	}
	if sr.state.sizer.meanRow.Load() <= 0 {
		limit = min(limit, sampleRows) // the first read measures a few rows before it reads a batch of them
	}
	read, err := sr.read(ctx, tx, c, limit, sr.cfg.BatchBytes)
	if err != nil {
		return read, err
	}
	sr.wake.Note(read.events)
	sr.state.sizer.observe(read.events, limit, sr.cfg.BatchBytes)
	return read, nil
}

// past returns c with its position at the last row of read, which holds rows.
func past(c streamCursor, read streamRead) streamCursor {
	last := len(read.events) - 1
	c.AfterXid.String, c.AfterXid.Valid = read.xids[last], true
	c.AfterID.Int64, c.AfterID.Valid = read.events[last].ID, true
	return c
}
