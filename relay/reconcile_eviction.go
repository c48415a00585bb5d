package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// ErrEvictionPolicy is wrapped by CheckEvictionPolicy's error when Redis's maxmemory-policy lets it evict
// asynq's keys.
var ErrEvictionPolicy = errors.New("relay: Redis may evict asynq's keys")

// CheckEvictionPolicy reads Redis's maxmemory-policy and maxmemory (CONFIG GET; on a Cluster, of every
// master) and says whether Redis may evict asynq's keys under memory pressure:
//
//   - noeviction: nil. Redis refuses writes when full (the relay's enqueues fail, and are retried) and
//     evicts nothing.
//   - volatile-lru, volatile-lfu, volatile-random, volatile-ttl: an error wrapping ErrEvictionPolicy.
//     These evict only keys with a TTL. asynq's pending, scheduled, retry, archived and active tasks have
//     none and stay; its completed tasks have one (they are kept for TaskRetention), and so have the
//     reconciler's markers. An evicted completed task no longer dedupes its TaskID, and the reconciler
//     takes it for lost: its event is delivered again (the inbox absorbs it). An evicted marker costs a
//     sweep.
//   - allkeys-lru, allkeys-lfu, allkeys-random, or any other: an error wrapping ErrEvictionPolicy. Any key
//     can go, pending tasks too: committed events vanish from Redis, and since an eviction is no loss of
//     writes in order, no marker of the reconciler notices it (only Reconciler.Sweep finds them).
//
// With maxmemory 0 (no limit, the default of redis-server on 64-bit systems) Redis evicts nothing until
// a limit is set; the error says so. Another error (CONFIG refused by an ACL, renamed, a managed Redis
// that hides it, Redis unreachable) means that the policy could not be read.
func CheckEvictionPolicy(ctx context.Context, rdb redis.UniversalClient) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var (
			mu   sync.Mutex
			errs []error
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if err := checkEviction(ctx, node); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("node %s: %w", node.Options().Addr, err))
				mu.Unlock()
			}
			return nil
		})
		return errors.Join(append(errs, err)...)
	}
	return checkEviction(ctx, rdb)
}

// checkEviction is CheckEvictionPolicy on one server.
func checkEviction(ctx context.Context, rdb redis.Cmdable) error {
	policies, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return fmt.Errorf("relay: could not read Redis's maxmemory-policy (CONFIG GET): %w", err)
	}
	policy, ok := policies["maxmemory-policy"]
	if !ok {
		return errors.New("relay: could not read Redis's maxmemory-policy: CONFIG GET returned none")
	}
	if policy == "noeviction" {
		return nil
	}
	limit := ""
	if mm, err := rdb.ConfigGet(ctx, "maxmemory").Result(); err == nil && mm["maxmemory"] == "0" {
		limit = " (maxmemory is 0 now: nothing is evicted until a limit is set)"
	}
	if strings.HasPrefix(policy, "volatile-") {
		return fmt.Errorf("%w: maxmemory-policy is %s%s: it evicts keys with a TTL, among them asynq's completed tasks, "+
			"whose events the reconciler then takes for lost and delivers again (pending tasks have no TTL and stay); "+
			"set maxmemory-policy noeviction", ErrEvictionPolicy, policy, limit)
	}
	return fmt.Errorf("%w: maxmemory-policy is %s%s: it evicts any key, asynq's pending tasks too: committed events "+
		"would vanish from Redis unnoticed (no marker of the reconciler sees an eviction; only Reconciler.Sweep finds them); "+
		"set maxmemory-policy noeviction", ErrEvictionPolicy, policy, limit)
}

// warnEviction checks, as Run starts, the eviction policy of the Redis that the relay was given, and logs
// a warning when Redis may evict asynq's keys, or that it could not check.
func (r *Relay) warnEviction(ctx context.Context) {
	rdb := r.rdb
	if rdb == nil {
		if r.redisOpt == nil {
			return // Config.Enqueuer and no Redis options: the relay does not know where the tasks go
		}
		made, err := fromRedisOpt(r.redisOpt, func(o asynq.RedisConnOpt) any { return o.MakeRedisClient() })
		if rdb, _ = made.(redis.UniversalClient); err != nil || rdb == nil {
			return
		}
		defer func() { _ = rdb.Close() }()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := CheckEvictionPolicy(ctx, rdb)
	switch {
	case err == nil:
	case errors.Is(err, ErrEvictionPolicy):
		r.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: Redis may evict asynq's tasks", slog.Any("err", err))
	case ctx.Err() == nil:
		r.log.LogAttrs(ctx, slog.LevelInfo, "bunbox relay: could not check that Redis evicts no asynq task; "+
			"make sure its maxmemory-policy is noeviction", slog.Any("err", err))
	}
}
