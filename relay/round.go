package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// runOnce claims one batch in a transaction, enqueues it (marking the delivered rows published as it
// goes), marks the failed ones and commits: claim → deliver → settle. The transaction holds the row locks
// while the enqueues run, so no other relay can take the same rows, and a crash releases them: they are
// claimed again and deduplicated by TaskID.
//
// Rows that reached Redis are marked published even when others failed. A failed enqueue counts against
// its row only while Redis answers a PING; otherwise the round fails and the rows are released untouched.
func (r *Relay) runOnce(ctx context.Context) (res BatchEvent) {
	start := r.cfg.now()
	defer func() {
		res.Duration = r.cfg.now().Sub(start)
		r.record(ctx, res)
	}()
	if ctx.Err() != nil {
		return res
	}
	// The transaction must outlive ctx: database/sql rolls back a transaction whose context ends, and the
	// marks of what was enqueued have to be written.
	bg := context.WithoutCancel(ctx)
	// READ COMMITTED whatever the database's default, with the bounds that free the claims of a relay
	// cut off by a partition (session.go).
	bounds := r.cfg.bounds()
	tx, err := beginBounded(bg, r.db, bounds)
	if err != nil {
		res.Err = fmt.Errorf("begin: %w", err)
		return res
	}
	defer func() { _ = tx.Rollback() }()

	events, bad := r.claimBatch(ctx, tx, &res)
	if len(events) == 0 {
		return res
	}
	stop := keepAlive(bg, tx, bounds)
	d := r.deliverBatch(ctx, tx, events, bad, &res)
	stop()
	if res.Err != nil {
		return res
	}
	r.settle(bg, tx, events, d, &res)
	return res
}

// claimBatch claims the round's rows within the batch's row and byte budget. On an error it returns no
// rows and sets res.Err, unless ctx ended (a stop, not a failure).
func (r *Relay) claimBatch(ctx context.Context, tx bun.Tx, res *BatchEvent) ([]model.Event, map[int]error) {
	limit := r.sizer.limit(r.cfg.BatchSize, r.cfg.BatchBytes)
	events, bad, err := r.claimRound(ctx, tx, limit)
	if err != nil {
		if ctx.Err() == nil {
			res.Err = fmt.Errorf("claim: %w", err)
		}
		return nil, nil
	}
	res.Claimed = len(events)
	res.full = r.sizer.observe(events, limit, r.cfg.BatchBytes)
	return events, bad
}

// delivery is what deliverBatch learnt about the rows of a batch.
type delivery struct {
	errs     []error // by row: nil when the task reached Redis, errReleased, or why its enqueue failed
	marked   int     // rows marked published in the round's transaction
	failed   []int   // indexes of the rows whose enqueue failed
	firstErr error   // the first of their errors
}

// deliverBatch enqueues the rows, marking those that reached Redis as it goes, and sorts the outcomes. It
// sets res.Err when the marks could not be written: the round then commits nothing.
func (r *Relay) deliverBatch(ctx context.Context, tx bun.Tx, events []model.Event, bad map[int]error, res *BatchEvent) delivery {
	var d delivery
	var markErr error
	d.errs, d.marked, markErr = r.deliverMarking(ctx, tx, events, bad)
	for i, err := range d.errs {
		switch {
		case err == nil:
		case errors.Is(err, errReleased):
			res.Released++
		default:
			d.failed = append(d.failed, i)
			d.firstErr = cmpErr(d.firstErr, err)
		}
	}
	if markErr != nil {
		res.Err = fmt.Errorf("mark published: %w", markErr)
	}
	return d
}

// failures applies the retry policy to the rows whose enqueue failed: each is retried later or, after its
// last attempt (or when it cannot be delivered at all), dead. When Redis itself is unavailable no row is
// blamed: the failed rows are released and res.Err makes the relay back off.
func (r *Relay) failures(events []model.Event, d delivery, res *BatchEvent) []failure {
	if len(d.failed) == 0 {
		return nil
	}
	if unavailable(d.firstErr) {
		// Redis is unreachable, loading or failing over: not the rows' fault. Keep what arrived,
		// release the rest, back off.
		res.Released += len(d.failed)
		res.Err = fmt.Errorf("enqueue: %w", d.firstErr)
		return nil
	}
	if perr := r.ping(); perr != nil {
		res.Released += len(d.failed)
		res.Err = fmt.Errorf("enqueue: %w (ping: %w)", d.firstErr, perr)
		return nil
	}
	fails := make([]failure, 0, len(d.failed))
	for _, i := range d.failed {
		ev := &events[i]
		n := ev.Attempts + 1
		dead := n >= r.cfg.MaxAttempts || errors.Is(d.errs[i], errMalformedRow)
		f := failure{id: ev.ID, attempts: n, dead: dead, err: truncate(d.errs[i].Error(), 2000)}
		if !f.dead {
			f.delay = r.cfg.retryDelay(n)
		}
		fails = append(fails, f)
	}
	return fails
}

// settle writes the failed rows' next attempt (or death), commits the round, and reports: the counts in
// res, a log line per failed row, OnDead per dead one. With nothing to keep it commits nothing and the
// rollback releases the rows.
func (r *Relay) settle(ctx context.Context, tx bun.Tx, events []model.Event, d delivery, res *BatchEvent) {
	fails := r.failures(events, d, res)
	if d.marked == 0 && len(fails) == 0 {
		return
	}
	if err := markFailed(ctx, tx, fails); err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("mark failed: %w", err))
		return
	}
	if err := tx.Commit(); err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("commit: %w", err))
		return
	}
	res.Published = d.marked
	res.Failed = len(fails)
	r.keys.published(events)
	for i, f := range fails {
		ev := &events[d.failed[i]]
		if !f.dead {
			r.log.LogAttrs(ctx, slog.LevelDebug, "bunbox relay: enqueue failed, will retry",
				slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
				slog.String("task_type", ev.Name), slog.Int("attempt", f.attempts),
				slog.Duration("delay", f.delay), slog.String("err", f.err))
			continue
		}
		res.Dead++
		r.log.LogAttrs(ctx, slog.LevelError, "bunbox relay: event is dead after its last attempt",
			slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
			slog.String("task_type", ev.Name), slog.Int("attempts", f.attempts), slog.String("err", f.err))
		if r.cfg.Observer.OnDead != nil {
			r.cfg.Observer.OnDead(ctx, DeadEvent{ID: ev.ID, EventID: ev.EventID.String(), EventName: ev.Name,
				Attempts: f.attempts, Err: d.errs[d.failed[i]]})
		}
	}
}

// unavailable reports whether err says that Redis could not be reached or could not serve at all, as
// opposed to refusing this one task. asynq flattens the driver's errors into text, hence the strings.
func unavailable(err error) bool {
	if ne := net.Error(nil); errors.As(err, &ne) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "connection reset", "broken pipe", "i/o timeout", "EOF",
		"use of closed network connection", "LOADING", "READONLY", "MASTERDOWN", "OOM", "pool timeout",
		"context deadline exceeded", "no such host",
		// A Redis Cluster moving a slot, or electing a master: the client's redirections ran out.
		"CLUSTERDOWN", "TRYAGAIN", "MOVED ", " ASK "} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// ping reports whether Redis answers; without a Pinger it assumes so.
func (r *Relay) ping() error {
	if r.pinger == nil {
		return nil
	}
	return r.pinger.Ping()
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	// PostgreSQL text takes neither NUL nor invalid UTF-8 (a cut may split a rune).
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "")
}
