package relay

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// TestListenerReconnects kills the listener's server connection: the relay listens again (on either
// driver) and the next NOTIFY wakes it, with a poll interval far beyond the wait.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	outboxtest.SkipPooled(t, "the relay does not LISTEN through a transaction pooler (TestListenOnlyWhenDirect covers it)")
	ctx := context.Background()
	// An application_name of its own finds this relay's listener among the other tests' ones.
	app := "bunbox_listen_" + randHex(6)
	db := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t), "application_name": app})
	require.NoError(t, bunboxmigrate.Up(ctx, db))
	b := setupWith(t, db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})
	require.NoError(t, EnableNotifyTrigger(ctx, b.db, model.Location{}))
	r := b.newRelay(t, Config{PollInterval: time.Hour, MinPollInterval: time.Hour})
	run(t, r)
	listening := func(n int) func() bool {
		return func() bool { return len(b.logs.matching("listening for notifications")) >= n }
	}
	outboxtest.WaitFor(t, 10*time.Second, "the listener confirmed", listening(1))

	admin := outboxtest.Open(t, nil)
	var killed int
	require.NoError(t, admin.NewRaw(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = ? AND query ILIKE 'LISTEN%'`, app).Scan(ctx, &killed))
	require.Equal(t, 1, killed, "one listener connection")

	outboxtest.WaitFor(t, 30*time.Second, "the listener listening again", listening(2))
	insertEvents(t, b.db, b.queue, 1)
	outboxtest.WaitFor(t, 10*time.Second, "the event relayed after its NOTIFY", func() bool {
		return published(t, b.db) == 1
	})
}
