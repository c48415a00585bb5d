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
)

// runOnce claims one batch in a transaction, enqueues it (marking the delivered rows published as it
// goes), marks the failed ones and commits. The transaction holds the row locks while the enqueues run,
// so no other relay can take the same rows, and a crash releases them: they are claimed again and
// deduplicated by TaskID.
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
	tx, err := r.db.BeginTx(bg, nil)
	if err != nil {
		res.Err = fmt.Errorf("begin: %w", err)
		return res
	}
	defer func() { _ = tx.Rollback() }()

	limit := r.sizer.limit(r.cfg.BatchSize, r.cfg.BatchBytes)
	events, bad, err := r.claimRound(ctx, tx, limit)
	if err != nil {
		if ctx.Err() == nil {
			res.Err = fmt.Errorf("claim: %w", err)
		}
		return res
	}
	res.Claimed = len(events)
	res.full = r.sizer.observe(events, limit, r.cfg.BatchBytes)
	if len(events) == 0 {
		return res
	}

	errs, marked, markErr := r.deliverMarking(ctx, tx, events, bad)
	var failed []int
	var firstErr error
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, errReleased):
			res.Released++
		default:
			failed = append(failed, i)
			firstErr = cmpErr(firstErr, err)
		}
	}
	if markErr != nil {
		res.Err = fmt.Errorf("mark published: %w", markErr)
		return res
	}
	var fails []failure
	if len(failed) > 0 {
		if unavailable(firstErr) {
			// Redis is unreachable, loading or failing over: not the rows' fault. Keep what arrived,
			// release the rest, back off.
			res.Released += len(failed)
			res.Err = fmt.Errorf("enqueue: %w", firstErr)
		} else if perr := r.ping(); perr != nil {
			res.Released += len(failed)
			res.Err = fmt.Errorf("enqueue: %w (ping: %w)", firstErr, perr)
		} else {
			fails = make([]failure, 0, len(failed))
			for _, i := range failed {
				ev := &events[i]
				n := ev.Attempts + 1
				dead := n >= r.cfg.MaxAttempts || errors.Is(errs[i], errMalformedRow)
				f := failure{id: ev.ID, attempts: n, dead: dead, err: truncate(errs[i].Error(), 2000)}
				if !f.dead {
					f.delay = r.cfg.retryDelay(n)
				}
				fails = append(fails, f)
			}
		}
	}

	if marked == 0 && len(fails) == 0 {
		return res // nothing to keep: the rollback releases the rows
	}
	if err := markFailed(bg, tx, fails); err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("mark failed: %w", err))
		return res
	}
	if err := tx.Commit(); err != nil {
		res.Err = errors.Join(res.Err, fmt.Errorf("commit: %w", err))
		return res
	}
	res.Published = marked
	res.Failed = len(fails)
	r.keys.published(events)
	for i, f := range fails {
		ev := &events[failed[i]]
		if !f.dead {
			r.log.LogAttrs(bg, slog.LevelDebug, "bunbox relay: enqueue failed, will retry",
				slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
				slog.String("task_type", ev.Name), slog.Int("attempt", f.attempts),
				slog.Duration("delay", f.delay), slog.String("err", f.err))
			continue
		}
		res.Dead++
		r.log.LogAttrs(bg, slog.LevelError, "bunbox relay: event is dead after its last attempt",
			slog.Int64("outbox_id", ev.ID), slog.String("event_id", ev.EventID.String()),
			slog.String("task_type", ev.Name), slog.Int("attempts", f.attempts), slog.String("err", f.err))
		if r.cfg.Hooks.OnDead != nil {
			r.cfg.Hooks.OnDead(bg, DeadEvent{ID: ev.ID, EventID: ev.EventID.String(), EventName: ev.Name,
				Attempts: f.attempts, Err: errs[failed[i]]})
		}
	}
	return res
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
