package relay

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// CheckEvictionPolicy tells the policies that keep asynq's tasks from those that may evict them, and
// says when it could not read the policy (CONFIG refused by an ACL). Run logs the same as it starts.
func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	admin := redis.NewClient(&redis.Options{Addr: rd.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	set := func(policy, maxmemory string) {
		require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", policy).Err())
		require.NoError(t, admin.ConfigSet(ctx, "maxmemory", maxmemory).Err())
	}

	set("noeviction", "0")
	require.NoError(t, CheckEvictionPolicy(ctx, admin))
	set("volatile-lru", "1gb")
	err := CheckEvictionPolicy(ctx, admin)
	require.ErrorIs(t, err, ErrEvictionPolicy)
	require.ErrorContains(t, err, "volatile-lru")
	require.ErrorContains(t, err, "completed tasks")
	set("allkeys-lru", "0")
	err = CheckEvictionPolicy(ctx, admin)
	require.ErrorIs(t, err, ErrEvictionPolicy)
	require.ErrorContains(t, err, "allkeys-lru")
	require.ErrorContains(t, err, "pending tasks too")
	require.ErrorContains(t, err, "maxmemory is 0")

	// A user whose ACL forbids CONFIG: the policy cannot be read, and the error does not pretend otherwise.
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">secret-pw", "~*", "&*", "+@all", "-config").Err())
	limited := redis.NewClient(&redis.Options{Addr: rd.Addr(), Username: "noconfig", Password: "secret-pw"})
	t.Cleanup(func() { _ = limited.Close() })
	err = CheckEvictionPolicy(ctx, limited)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrEvictionPolicy))
	require.ErrorContains(t, err, "could not read Redis's maxmemory-policy")
	require.NotContains(t, err.Error(), "secret-pw")

	// The relay says so as it starts: Warn for a policy that evicts, Info when it could not check.
	db, _ := outboxtest.Schema(t)
	for _, tc := range []struct {
		opt   asynq.RedisClientOpt
		level slog.Level
		msg   string
	}{
		{asynq.RedisClientOpt{Addr: rd.Addr()}, slog.LevelWarn, "Redis may evict asynq's tasks"},
		{asynq.RedisClientOpt{Addr: rd.Addr(), Username: "noconfig", Password: "secret-pw"}, slog.LevelInfo, "could not check"},
	} {
		b := setupWith(t, db, tc.opt)
		r := b.newRelay(t, Config{Enqueuer: nil, DisableReconciler: true})
		stop := run(t, r)
		outboxtest.WaitFor(t, 30*time.Second, "the relay's word on eviction", func() bool {
			return len(b.logs.matching(tc.msg)) > 0
		})
		stop()
		rec := b.logs.matching(tc.msg)[0]
		require.Equal(t, tc.level, rec.Level)
		require.NotContains(t, attr(rec, "err").String(), "secret-pw")
	}
}
