package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/relay"
)

// readyTimeout bounds each check of one /readyz request.
const readyTimeout = 2 * time.Second

// health serves the standalone relay's probes: /healthz (the process is alive and serving) and /readyz
// (PostgreSQL and Redis answer and the schema is there; it also tells whether Redis may evict asynq's keys).
type health struct {
	db  bun.IDB
	rdb redis.UniversalClient
}

// newHealth makes the probes, with a Redis client of their own from opt; close it with close.
func newHealth(db bun.IDB, opt asynq.RedisConnOpt) (*health, error) {
	rdb, ok := opt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, fmt.Errorf("readiness: unusable Redis options %T", opt)
	}
	return &health{db: db, rdb: rdb}, nil
}

func (h *health) close() error { return h.rdb.Close() }

// readyReport is the body of /readyz: "ok" or the error of each check.
type readyReport struct {
	Ready    bool   `json:"ready"`
	Postgres string `json:"postgres"`
	Schema   string `json:"schema"`
	Redis    string `json:"redis"`
	// RedisEviction is "ok" when Redis's maxmemory-policy is noeviction, else what it may evict or why it
	// could not be read (relay.CheckEvictionPolicy). It is a warning: it does not make the relay unready.
	RedisEviction string `json:"redis_eviction"`
}

func (h *health) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintln(w, "ok")
}

func (h *health) readyz(w http.ResponseWriter, req *http.Request) {
	rep := h.check(req.Context())
	w.Header().Set("Content-Type", "application/json")
	if !rep.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rep)
}

// check runs the checks at once, each bounded by readyTimeout.
func (h *health) check(ctx context.Context) readyReport {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	rep := readyReport{Postgres: "ok", Schema: "ok", Redis: "ok"}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := h.db.ExecContext(ctx, "SELECT 1"); err != nil {
			rep.Postgres, rep.Schema = err.Error(), "unknown: PostgreSQL does not answer"
			return
		}
		switch err := relay.CheckSchema(ctx, h.db); {
		case errors.Is(err, relay.ErrNoSchema), errors.Is(err, relay.ErrReadOnly):
			rep.Schema = err.Error() // it says what to run, or why the relay cannot write
		case err != nil:
			rep.Schema = fmt.Sprintf("%v (run `bunbox migrate up`)", err)
		}
	})
	wg.Go(func() {
		if err := h.rdb.Ping(ctx).Err(); err != nil {
			rep.Redis = err.Error()
			rep.RedisEviction = "unknown: Redis does not answer"
			return
		}
		rep.RedisEviction = "ok"
		if err := relay.CheckEvictionPolicy(ctx, h.rdb); err != nil {
			rep.RedisEviction = err.Error()
		}
	})
	wg.Wait()
	rep.Ready = rep.Postgres == "ok" && rep.Schema == "ok" && rep.Redis == "ok"
	return rep
}
