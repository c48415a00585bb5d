package outboxtest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestStartRedisRestart(t *testing.T) {
	t.Parallel()
	rd := outboxtest.StartRedis(t, nil)
	require.NotEmpty(t, rd.Addr())
	rd.Stop(t)
	rd.Start(t)
}

func TestStartPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := outboxtest.StartPostgres(t)
	db := pg.Schema(t)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, "INSERT INTO outbox_events (event_id, event_name, payload) VALUES (gen_random_uuid(), 'x', '{}')")
	require.NoError(t, err)
	pg.Stop(t)
	pg.Start(t)
	outboxtest.WaitFor(t, 10e9, "postgres back", func() bool { return db.PingContext(ctx) == nil })
	require.EqualValues(t, 1, outboxtest.Count(t, db, "outbox_events", ""))
	pg.Crash(t)
	pg.Start(t)
}

func TestStartRedisCluster(t *testing.T) {
	t.Parallel()
	c := outboxtest.StartRedisCluster(t, nil)
	require.Len(t, c.Addrs(), 3)
	nodes := map[int]bool{}
	for _, q := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		nodes[c.NodeOf(t, "asynq:{"+q+"}:pending")] = true
	}
	require.Len(t, nodes, 3, "eight queues land on all three nodes")
	c.Nodes[2].Stop(t)
	c.Nodes[2].Start(t)
	c.WaitOK(t)
}
