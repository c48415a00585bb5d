package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// readyTimeout bounds each check of one readiness probe.
const readyTimeout = 2 * time.Second

// evictionNotChecked is Readiness.RedisEviction for a relay given Config.Enqueuer: its Redis connections
// are not the relay's, so the policy is not read.
const evictionNotChecked = "not checked: Config.Enqueuer was given"

// redisNotChecked is Readiness.Redis for a relay whose Config.Enqueuer has no Ping method.
const redisNotChecked = "not checked: Config.Enqueuer has no Ping method"

// Readiness is what Relay.Ready found: "ok" or the error of each check. It is the JSON body of the
// readiness probe that HealthHandler serves, e.g.
// {"ready":false,"postgres":"ok","schema":"ok","redis":"dial tcp 127.0.0.1:6379: connect: connection refused"}.
type Readiness struct {
	Ready    bool   `json:"ready"`
	Postgres string `json:"postgres"`
	Schema   string `json:"schema"`
	Redis    string `json:"redis"`
	// Rounds is "ok" unless the relay's rounds have been failing for longer than Config.UnreadyAfter,
	// which makes the relay not ready: it then says for how long and the last round's error, e.g.
	// "failing for 45s (since 2026-12-04T10:00:00Z): enqueue: NOPERM this user has no permissions to run
	// the 'evalsha' command". A round that succeeds makes it "ok" again.
	Rounds string `json:"rounds"`
	// RedisEviction is "ok" when Redis's maxmemory-policy cannot evict asynq's keys, else what it may evict
	// or why it could not be read (CheckEvictionPolicy). It is a warning: it does not make the relay unready.
	RedisEviction string `json:"redis_eviction"`
}

// Ready checks, at once and each within 2 s, that PostgreSQL answers, that the outbox table has every
// column the relay's claim reads (CheckSchema), and that Redis answers PING on the relay's own
// connections (through Config.Enqueuer's Ping method when it was given one); and that the relay's rounds
// have not been failing for longer than Config.UnreadyAfter (Redis answering PING but refusing the
// enqueues, a permission the relay's role lacks, ...).
func (r *Relay) Ready(ctx context.Context) Readiness {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	rep := Readiness{Postgres: "ok", Schema: "ok", Redis: "ok", Rounds: r.health.state(r.cfg.UnreadyAfter, r.cfg.now())}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := r.db.ExecContext(ctx, "SELECT 1"); err != nil {
			rep.Postgres, rep.Schema = err.Error(), "unknown: PostgreSQL does not answer"
			return
		}
		switch err := checkSchemaOf(ctx, r.db, r.names); {
		case errors.Is(err, ErrNoSchema), errors.Is(err, ErrReadOnly):
			rep.Schema = err.Error() // it says what to run, or why the relay cannot write
		case err != nil:
			rep.Schema = fmt.Sprintf("%v (run `bunbox migrate up` or migrate.Up)", err)
		}
	})
	wg.Go(func() {
		if r.rdb == nil {
			rep.RedisEviction = evictionNotChecked // the Enqueuer's Redis is not the relay's to read
		}
		if err := r.pingRedis(ctx); err != nil {
			rep.Redis = err.Error()
			if r.rdb != nil {
				rep.RedisEviction = "unknown: Redis does not answer"
			}
			return
		}
		if r.rdb == nil {
			return
		}
		rep.RedisEviction = "ok"
		if err := CheckEvictionPolicy(ctx, r.rdb); err != nil {
			rep.RedisEviction = err.Error()
		}
	})
	wg.Wait()
	rep.Ready = rep.Postgres == "ok" && rep.Schema == "ok" && (rep.Redis == "ok" || rep.Redis == redisNotChecked) && rep.Rounds == "ok"
	return rep
}

// roundHealth is since when the relay's rounds have been failing, for Ready.
type roundHealth struct {
	mu           sync.Mutex
	failingSince time.Time // the first failure since the last round that succeeded; zero when that one did
	lastErr      error
}

// record notes the outcome of a round: err is its error, nil when it succeeded (an empty round too).
func (h *roundHealth) record(err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.failingSince, h.lastErr = time.Time{}, nil
		return
	}
	if h.failingSince.IsZero() {
		h.failingSince = now
	}
	h.lastErr = err
}

// state is Readiness.Rounds: "ok", or how long the rounds have been failing when that is longer than
// bound (never for a negative bound), with the last error.
func (h *roundHealth) state(bound time.Duration, now time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failingSince.IsZero() || bound < 0 {
		return "ok"
	}
	failing := now.Sub(h.failingSince)
	if failing <= bound {
		return "ok"
	}
	return fmt.Sprintf("failing for %s (since %s, longer than Config.UnreadyAfter %s): %v",
		failing.Round(time.Second), h.failingSince.UTC().Format(time.RFC3339), bound, h.lastErr)
}

// pingRedis pings Redis within ctx.
func (r *Relay) pingRedis(ctx context.Context) error {
	switch {
	case r.rdb != nil:
		return r.rdb.Ping(ctx).Err()
	case r.pinger == nil:
		return errors.New(redisNotChecked)
	}
	done := make(chan error, 1)
	go func() { done <- r.pinger.Ping() }() // Ping takes no context: do not wait past ctx
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("Redis PING: %w", ctx.Err())
	}
}

// HealthHandler serves the probes of a relay that runs inside a service (the standalone `bunbox relay`
// serves the same):
//
//   - GET /healthz: 200 "ok" while the process serves HTTP (liveness).
//   - GET /readyz: 200 when Ready finds everything ok, else 503; the body is the Readiness as JSON.
//
// Mount it on both paths of the service's mux, or on "/" of a probe port:
//
//	h := r.HealthHandler()
//	mux.Handle("GET /healthz", h)
//	mux.Handle("GET /readyz", h)
func (r *Relay) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		rep := r.Ready(req.Context())
		w.Header().Set("Content-Type", "application/json")
		if !rep.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
	return mux
}
