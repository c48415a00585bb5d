package ui

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// The sign-in throttle: every refused token (a sign-in or HTTP basic auth) takes one from its client's
// bucket and one from the Handler's; a bucket refills at a steady rate up to its burst. While either is
// empty, every attempt of the client (even with the right token) gets 429 without being compared.
const (
	clientBurst   = 5                // refused tokens a client may send at once
	clientRefill  = 10 * time.Second // then one more per 10 s
	globalBurst   = 30               // refused tokens all clients may send at once
	globalRefill  = time.Second      // then one more per second
	maxClients    = 10_000           // clients tracked; past that only the global bucket counts
	refusedLogGap = time.Minute      // at most one Warn line per minute about refused tokens
)

// bucket is a token bucket of allowed failures.
type bucket struct {
	tokens float64
	at     time.Time
}

// fill refills b for the time since its last fill, up to burst; a new bucket starts full.
func (b *bucket) fill(now time.Time, burst float64, every time.Duration) {
	if b.at.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+float64(now.Sub(b.at))/float64(every))
	}
	b.at = now
}

// wait is how long until b has one token again.
func (b *bucket) wait(every time.Duration) time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(every))
}

// throttle limits the failed sign-ins of a Handler, and logs them through a limitedLog.
type throttle struct {
	log *limitedLog
	now func() time.Time

	mu      sync.Mutex
	clients map[string]*bucket
	global  bucket
}

func newThrottle(log *slog.Logger) *throttle {
	return &throttle{log: newLimitedLog(log, "bunbox ui: sign-in refused"), now: time.Now, clients: map[string]*bucket{}}
}

// allow reports whether client may try a token now, and if not, how long until it may.
func (t *throttle) allow(client string) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.global.fill(now, globalBurst, globalRefill)
	wait := t.global.wait(globalRefill)
	if b := t.clients[client]; b != nil {
		b.fill(now, clientBurst, clientRefill)
		wait = max(wait, b.wait(clientRefill))
	}
	return wait == 0, wait
}

// failed charges a refused token to client and to the Handler.
func (t *throttle) failed(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.global.fill(now, globalBurst, globalRefill)
	t.global.tokens = max(0, t.global.tokens-1)
	b := t.clients[client]
	if b == nil {
		if len(t.clients) >= maxClients {
			for k, c := range t.clients { // forget the clients that are back to a full bucket
				if c.fill(now, clientBurst, clientRefill); c.tokens >= clientBurst {
					delete(t.clients, k)
				}
			}
		}
		if len(t.clients) >= maxClients {
			return
		}
		b = &bucket{}
		t.clients[client] = b
	}
	b.fill(now, clientBurst, clientRefill)
	b.tokens = max(0, b.tokens-1)
}

// limitedLog writes a Warn line about refused requests (sign-ins, writes): the first at once, the ones
// after within refusedLogGap as one line with their count when the gap is over, so a flood of refused
// requests writes a line a minute, not one each.
type limitedLog struct {
	log *slog.Logger
	msg string

	mu      sync.Mutex
	logged  time.Time   // when the last line was written
	pending int         // refused since that line
	why     string      // the last refusal's reason, for the next line
	flush   *time.Timer // writes the pending count when nothing else will
	closed  bool
}

func newLimitedLog(log *slog.Logger, msg string) *limitedLog {
	return &limitedLog{log: log, msg: msg}
}

// refused counts one refused request and logs it, or leaves it to the next line.
func (l *limitedLog) refused(why string, attrs ...slog.Attr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.pending++
	l.why = why
	if l.logged.IsZero() || now.Sub(l.logged) >= refusedLogGap {
		l.writeLocked(now, attrs)
		return
	}
	if l.flush == nil && !l.closed {
		l.flush = time.AfterFunc(refusedLogGap-now.Sub(l.logged), func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.flush = nil
			if l.pending > 0 && !l.closed {
				l.writeLocked(time.Now(), nil)
			}
		})
	}
}

// writeLocked writes the line: how many were refused since the last one, the last reason, and the
// attributes of the request that triggered it (none when the timer writes it).
func (l *limitedLog) writeLocked(now time.Time, attrs []slog.Attr) {
	attrs = append([]slog.Attr{slog.Int("refused", l.pending), slog.String("last_reason", l.why)}, attrs...)
	if !l.logged.IsZero() {
		attrs = append(attrs, slog.Duration("since_last_line", now.Sub(l.logged).Round(time.Second)))
	}
	l.log.LogAttrs(context.Background(), slog.LevelWarn, l.msg, attrs...)
	l.logged, l.pending = now, 0
}

// close stops the pending line's timer.
func (l *limitedLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.flush != nil {
		l.flush.Stop()
		l.flush = nil
	}
}
