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

// throttle limits the failed sign-ins of a Handler and the log lines about them.
type throttle struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	clients map[string]*bucket
	global  bucket
	logged  time.Time   // when the last line about refused tokens was written
	pending int         // refused since that line
	why     string      // the last refusal's reason, for the next line
	flush   *time.Timer // writes the pending count when nothing else will
	closed  bool
}

func newThrottle(log *slog.Logger) *throttle {
	return &throttle{log: log, now: time.Now, clients: map[string]*bucket{}}
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

// refused logs a refused token at Warn: the first at once, the ones after within refusedLogGap as one
// line with their count when the gap is over, so a flood of wrong tokens writes a line a minute.
func (t *throttle) refused(why, remote string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.pending++
	t.why = why
	if t.logged.IsZero() || now.Sub(t.logged) >= refusedLogGap {
		t.writeLocked(now, remote)
		return
	}
	if t.flush == nil && !t.closed {
		t.flush = time.AfterFunc(refusedLogGap-now.Sub(t.logged), func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.flush = nil
			if t.pending > 0 && !t.closed {
				t.writeLocked(t.now(), "")
			}
		})
	}
}

func (t *throttle) writeLocked(now time.Time, remote string) {
	attrs := []slog.Attr{slog.Int("refused", t.pending), slog.String("last_reason", t.why)}
	if remote != "" {
		attrs = append(attrs, slog.String("remote", remote))
	}
	if !t.logged.IsZero() {
		attrs = append(attrs, slog.Duration("since_last_line", now.Sub(t.logged).Round(time.Second)))
	}
	t.log.LogAttrs(context.Background(), slog.LevelWarn, "bunbox ui: sign-in refused", attrs...)
	t.logged, t.pending = now, 0
}

// close stops the pending log line's timer.
func (t *throttle) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.flush != nil {
		t.flush.Stop()
		t.flush = nil
	}
}
