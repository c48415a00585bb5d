package store

import (
	"context"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
)

// markPublishedSQL marks the rows whose ids are in its one argument, an array, published.
const markPublishedSQL = `UPDATE outbox_events SET published_at = now(), next_attempt_at = NULL
WHERE id = ANY(?)`

// chargeSQL writes the outcome of a failed enqueue on each row of its arrays: the attempts, the error,
// and the next attempt after the delay or, for a dead row, dead_at.
const chargeSQL = `UPDATE outbox_events AS o SET
  attempts = f.attempts,
  last_error = f.err,
  next_attempt_at = CASE WHEN f.dead THEN NULL ELSE now() + f.delay * interval '1 microsecond' END,
  dead_at = CASE WHEN f.dead THEN now() END
FROM unnest(?::bigint[], ?::int[], ?::bigint[], ?::boolean[], ?::text[]) AS f(id, attempts, delay, dead, err)
WHERE o.id = f.id`

// handOverSQL gives rows of the stream to the per-row path (the exception queue): they are pending rows
// from then on. A row that left the stream meanwhile (DisableStream, or a key tracker of an older release)
// is not touched.
const handOverSQL = `UPDATE outbox_events SET published_at = NULL
WHERE id = ANY(?) AND published_at = ` + streamsql.Sentinel

// settleCancelsSQL settles the cancels of streamed rows the stream passed without enqueueing them, as
// bunx's cancel settles a pending row's: never published, and a keyed one completed so that it does not
// hold its key. A cancel settled meanwhile (by a relay of an older release) is kept. Arguments: the
// result, the ids.
const settleCancelsSQL = `UPDATE outbox_events SET cancel_settled_at = now(), cancel_result = ?,
  completed_at = CASE WHEN ordering_key IS NOT NULL THEN coalesce(completed_at, now()) ELSE completed_at END
WHERE id = ANY(?) AND cancel_settled_at IS NULL`

// Charge is the outcome of a failed enqueue written on its row: an attempt charged, and the next one
// after Delay, or the row dead.
type Charge struct {
	ID       int64
	Attempts int // including this one
	Delay    time.Duration
	Dead     bool
	Err      string
}

// Marks writes the transitions of rows a round delivered or tried, on one outbox's tables: each row
// published, charged an attempt or dead, handed to the exception queue, its cancel settled.
type Marks struct {
	prepared *Prepared
	charge   string
	handOver string
	cancels  string
}

// NewMarks returns the marks of names's outbox; the marks of delivered rows run prepared through p where
// it can.
func NewMarks(names tables.Names, p *Prepared) *Marks {
	return &Marks{prepared: p, charge: names.SQL(chargeSQL), handOver: names.SQL(handOverSQL),
		cancels: names.SQL(settleCancelsSQL)}
}

// Unsynced makes the rest of tx commit without waiting for the WAL flush: a mark or a cursor move lost in
// a database crash only means rows are enqueued again, which their TaskIDs absorb. This takes the fsync
// off the relay's critical path.
func (m *Marks) Unsynced(ctx context.Context, tx bun.Tx) error {
	_, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = off")
	return err
}

// Published marks the rows of ids published (markPublishedSQL), prepared where it can.
func (m *Marks) Published(ctx context.Context, tx bun.Tx, ids []int64) error {
	p := &m.prepared.mark
	stmt := p.in(ctx, tx)
	if stmt == nil {
		_, err := tx.NewRaw(p.plain, pgdialect.Array(ids)).Exec(ctx)
		return err
	}
	_, err := stmt.ExecContext(ctx, int64Array(ids))
	p.failed(err)
	return err
}

// Charged writes each charge on its row: an attempt charged, and the next attempt or death.
func (m *Marks) Charged(ctx context.Context, tx bun.Tx, cs []Charge) error {
	if len(cs) == 0 {
		return nil
	}
	ids := make([]int64, len(cs))
	attempts := make([]int64, len(cs))
	delays := make([]int64, len(cs))
	dead := make([]bool, len(cs))
	errs := make([]string, len(cs))
	for i, c := range cs {
		ids[i], attempts[i], delays[i], dead[i], errs[i] = c.ID, int64(c.Attempts), c.Delay.Microseconds(), c.Dead, c.Err
	}
	_, err := tx.NewRaw(m.charge, pgdialect.Array(ids), pgdialect.Array(attempts), pgdialect.Array(delays),
		pgdialect.Array(dead), pgdialect.Array(errs)).Exec(ctx)
	return err
}

// HandedOver gives the streamed rows of ids to the per-row path, the exception queue (handOverSQL).
func (m *Marks) HandedOver(ctx context.Context, tx bun.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.NewRaw(m.handOver, pgdialect.Array(ids)).Exec(ctx)
	return err
}

// CancelsSettled settles with result the cancels of the streamed rows of ids, which the stream passed
// without enqueueing them (settleCancelsSQL).
func (m *Marks) CancelsSettled(ctx context.Context, tx bun.Tx, result string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.NewRaw(m.cancels, result, pgdialect.Array(ids)).Exec(ctx)
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
