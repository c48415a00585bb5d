package relay

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/model"
)

// The wake-up: an idle relay reads, every Config.WakeInterval, the last value of the sequence behind
// outbox_events.id (pg_sequence_last_value: one autocommitted statement of a few microseconds of server
// CPU, no lock on the table, no session state, so it works through a transaction pooler), and runs a round
// as soon as it moved. It costs the write path nothing: nextval already writes the value at INSERT.
//
// nextval runs at INSERT, before the commit: a value can move for a transaction that has not committed
// yet, or that rolls back. The round it wakes then finds nothing, so the watcher wakes the relay again,
// after 1, 2, 4, 8, ... wake intervals, until a round claims a row at or past that value or wakeRetries
// rounds went by; after that PollInterval (the safety net) takes over. A relay whose rows another replica
// claimed stops after those few rounds in the same way.
//
// What the wake-up cannot see: a sequence whose CACHE is over 1 (a session hands out values it took
// before, without moving last_value) and a role without SELECT or USAGE on the sequence. In both cases the
// relay logs a warning at start and waits up to PollInterval after a quiet spell, as without the wake-up.

// wakeIntervalDefault is Config.WakeInterval's default.
const wakeIntervalDefault = 5 * time.Millisecond

// wakeRetries is how many more times one move of the sequence wakes the relay when the rounds it woke
// found nothing at or past the moved value (the inserting transaction had not committed yet).
const wakeRetries = 7

// insufficientPrivilege is SQLSTATE 42501.
const insufficientPrivilege = "42501"

// wakeSequenceSQL finds the sequence behind outbox_events.id, whether the relay's role may read it, its
// cache size (NULL when there is no such sequence), and the role's name.
const wakeSequenceSQL = `SELECT s, has_sequence_privilege(s, 'SELECT, USAGE'),
  (SELECT seqcache FROM pg_sequence WHERE seqrelid = s::regclass), quote_ident(current_user)
FROM (SELECT pg_get_serial_sequence('outbox_events', 'id') AS s) q`

// wakeState is what the watcher shares with the rounds: the largest id the relay has claimed, and how
// many times the watcher read the sequence (for the tests).
type wakeState struct {
	claimed atomic.Int64
	rowsAt  atomic.Int64 // when a claim last returned rows, in Unix nanoseconds
	reads   atomic.Int64
	wakes   atomic.Int64 // how many times the watcher's timer fired, read or not (for the tests)
	role    string       // the relay's role, quoted, for the GRANT a warning names
}

// note records the ids of a claim.
func (c *wakeState) note(events []model.Event) {
	if len(events) > 0 {
		c.rowsAt.Store(time.Now().UnixNano())
	}
	for i := range events {
		for {
			old := c.claimed.Load()
			if events[i].ID <= old || c.claimed.CompareAndSwap(old, events[i].ID) {
				break
			}
		}
	}
}

// hotFor is how much longer the relay polls at MinPollInterval after its last claim that returned rows
// (hotWindow, see Config.idleWait), when that is as often as the wake-up would look (MinPollInterval at
// most WakeInterval); 0 when it does not. A read then buys nothing: the watcher sleeps until the window
// ends instead of waking every WakeInterval to find the relay busy, which under steady traffic cost the
// relay's process a timer wake-up 200 times a second for nothing. A claim during the sleep moves the end
// of the window; the watcher looks again when it wakes.
func (c *wakeState) hotFor(cfg Config, now time.Time) time.Duration {
	if cfg.MinPollInterval > cfg.WakeInterval {
		return 0
	}
	return max(0, hotWindow-now.Sub(time.Unix(0, c.rowsAt.Load())))
}

// wakeSequence returns the sequence to watch, or "" after logging why there is none.
func (r *Relay) wakeSequence(ctx context.Context) (string, bool) {
	for failures := 0; ; {
		var seq sql.NullString
		var allowed sql.NullBool
		var cache sql.NullInt64
		err := r.db.NewRaw(r.names.SQL(wakeSequenceSQL)).Scan(ctx, &seq, &allowed, &cache, &r.wake.role)
		if err == nil {
			return r.wakeUsable(ctx, seq.String, allowed.Bool, cache)
		}
		if ctx.Err() != nil {
			return "", false
		}
		failures++
		if !r.wakeBackoff(ctx, failures, err) {
			return "", false
		}
	}
}

// wakeReadSQL is the watcher's statement, a literal with no arguments: one message to the server and
// one back, in the simple protocol on either driver. It goes to the *sql.DB under the *bun.DB, so that
// the query hooks of an application (tracing, logging) do not see a statement 200 times a second.
func wakeReadSQL(seq string) string {
	return "SELECT pg_sequence_last_value('" + strings.ReplaceAll(seq, "'", "''") + "'::regclass)"
}

// wakeBackoff logs a failed read of the watcher and waits the round backoff for its failures in a row;
// it reports false when ctx ended first.
func (r *Relay) wakeBackoff(ctx context.Context, failures int, err error) bool {
	return r.helperBackoff(ctx, "bunbox relay: wake-up read failed, retrying", failures, err)
}

// wakeUsable says, with a warning, why the sequence seq cannot drive the wake-up, or returns it.
func (r *Relay) wakeUsable(ctx context.Context, seq string, allowed bool, cache sql.NullInt64) (string, bool) {
	why := ""
	switch {
	case seq == "":
		why = "outbox_events.id has no sequence (it is not an identity or serial column)"
	case !allowed:
		why = "the relay's role may not read the sequence " + seq + ": GRANT USAGE ON SEQUENCE " + seq + " TO " + r.wake.role
	case cache.Int64 > 1:
		why = "the sequence " + seq + " has CACHE over 1, so its last value does not move with every insert: ALTER SEQUENCE " + seq + " CACHE 1"
	}
	if why == "" {
		return seq, true
	}
	r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: no wake-up after a quiet spell: "+why+
		"; the first event after a quiet spell waits up to PollInterval (set WakeInterval to -1 to silence this)",
		slog.Duration("poll_interval", r.cfg.PollInterval))
	return "", false
}

// watchInserts wakes the relay's loop when the sequence behind outbox_events.id moves, until ctx ends.
func (r *Relay) watchInserts(ctx context.Context, wake chan<- struct{}) {
	seq, ok := r.wakeSequence(ctx)
	if !ok {
		return
	}
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	read := wakeReadSQL(seq)
	timer := time.NewTimer(r.cfg.WakeInterval)
	defer timer.Stop()
	var last sql.NullInt64
	known := false
	var target int64      // the moved value no round has claimed up to yet; 0: none
	var movedAt time.Time // when it moved
	retries, skip := 0, 0
	for failures := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		r.wake.wakes.Add(1)
		if hot := r.wake.hotFor(r.cfg, time.Now()); hot > 0 {
			timer.Reset(max(hot, r.cfg.WakeInterval)) // the loop polls at MinPollInterval until then
			continue
		}
		timer.Reset(r.cfg.WakeInterval)
		var v sql.NullInt64
		err := r.db.DB.QueryRowContext(ctx, read).Scan(&v)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if pgerr.Is(err, insufficientPrivilege) {
				r.wakeUsable(ctx, seq, false, sql.NullInt64{})
				return
			}
			failures++
			if !r.wakeBackoff(ctx, failures, err) { // an outage: the rounds back off too
				return
			}
			continue
		}
		failures = 0
		r.wake.reads.Add(1)
		switch {
		case !known: // a round now takes what came before this first read
			last, known = v, true
			signal()
		case v != last:
			last = v
			target, movedAt, retries, skip = v.Int64, time.Now(), 0, 0
			signal()
		case target == 0:
		case r.wake.claimed.Load() >= target || retries >= wakeRetries || time.Since(movedAt) > r.cfg.PollInterval:
			target = 0 // claimed, or left to the poll
		case skip > 0:
			skip--
		default:
			retries++
			skip = 1<<retries - 1 // wake again after 1, 2, 4, 8, ... intervals
			signal()
		}
	}
}
