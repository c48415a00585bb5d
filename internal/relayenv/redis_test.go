package relayenv

import (
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
)

func TestRedis(t *testing.T) {
	t.Parallel()

	lookup := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "OUTBOX_REDIS_URL" && v != "unset" {
				return v, true
			}
			return "", false
		}
	}
	_, ok, err := redisFromLookup(lookup("unset"))
	require.NoError(t, err)
	require.False(t, ok)

	opt, ok, err := redisFromLookup(lookup("redis://:pw@cache:6380/2"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, asynq.RedisClientOpt{Addr: "cache:6380", Password: "pw", DB: 2}, opt)

	_, _, err = redisFromLookup(lookup("redis://:Pa%ZZsecret@cache"))
	require.ErrorContains(t, err, "invalid Redis URL redis://:xxxxx@cache")
	require.NotContains(t, err.Error(), "secret")
}
