package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestStartLogSaysWhatTheRelayUses: the start log names the database (user, server, name: no password),
// the outbox table, Redis's address and the delivery mode, per-row and then stream.
func TestStartLogSaysWhatTheRelayUses(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	b := setup(t)
	var dbname string
	require.NoError(t, b.db.NewRaw("SELECT current_database()").Scan(context.Background(), &dbname))
	started := func() map[string]string {
		r, err := New(b.db, b.redis, Config{Logger: b.logs.logger(), DisableReconciler: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		before := len(b.logs.matching("bunbox relay started"))
		stop := run(t, r)
		outboxtest.WaitFor(t, 10*time.Second, "the start log", func() bool { return len(b.logs.matching("bunbox relay started")) > before })
		stop()
		rec := b.logs.matching("bunbox relay started")[before]
		out := map[string]string{}
		for _, k := range []string{"database", "table", "redis", "delivery"} {
			out[k] = attr(rec, k).String()
		}
		return out
	}
	got := started()
	require.Regexp(t, `^\w+@[0-9a-f.:\[\]]+:\d+/`+dbname+`$`, got["database"])
	require.Equal(t, "outbox_events", got["table"])
	require.Equal(t, b.redis.Addr+"/0", got["redis"])
	delivery := "stream"
	if outboxtest.StreamOff() {
		delivery = "per-row"
	}
	require.Equal(t, delivery, got["delivery"])
	require.False(t, strings.Contains(got["database"], "password"))

	require.NoError(t, EnableStream(context.Background(), b.db, model.Location{}))
	require.Equal(t, "stream", started()["delivery"])

	require.Equal(t, "Config.Enqueuer's", redisName(asynq.RedisClientOpt{Addr: "x"}, true))
	require.Equal(t, "cluster a:1,b:2", redisName(asynq.RedisClusterClientOpt{Addrs: []string{"a:1", "b:2"}, Password: "secret"}, false))
	require.Equal(t, "sentinel m at s:1", redisName(&asynq.RedisFailoverClientOpt{MasterName: "m", SentinelAddrs: []string{"s:1"}, Password: "secret"}, false))
}
