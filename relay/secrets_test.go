package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/connect"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// lockedBuffer is a bytes.Buffer that a logger and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// No password in Redis options reaches the errors of relay.New and relay.NewReconciler, or the logs of a
// relay whose Redis goes away.
func TestRedisPasswordNeverShows(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	db, _ := outboxtest.Schema(t)

	const secret = "Rel4yS3cret"
	protected := outboxtest.StartRedis(t, &outboxtest.RedisOptions{Password: "the-right-one", NoPersistence: true})
	fromURL := func(u string) asynq.RedisConnOpt {
		opt, err := connect.Redis(u)
		require.NoError(t, err)
		return opt
	}
	closed := closedPort(t)
	opts := map[string]asynq.RedisConnOpt{
		"Unreachable":         asynq.RedisClientOpt{Addr: closed, Password: secret, DialTimeout: time.Second},
		"BadAddr":             asynq.RedisClientOpt{Addr: "not an address", Password: secret, DialTimeout: time.Second},
		"BadNetwork":          asynq.RedisClientOpt{Network: "carrier-pigeon", Addr: closed, Password: secret},
		"WrongPassword":       asynq.RedisClientOpt{Addr: protected.Addr(), Password: secret},
		"WrongPasswordByURL":  fromURL("redis://:" + secret + "@" + protected.Addr() + "/1"),
		"WrongACLUserByURL":   fromURL("redis://app:" + secret + "@" + protected.Addr()),
		"SentinelUnreachable": fromURL("redis-sentinel://:" + secret + "@" + closed + "?master=m&password=" + secret),
		"ClusterUnreachable":  fromURL("redis-cluster://app:" + secret + "@" + closed),
		"TLSToAPlainServer":   fromURL("rediss://:" + secret + "@" + protected.Addr()),
	}
	for name, opt := range opts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var logs lockedBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			r, err := relay.New(db, opt, relay.Config{Logger: logger})
			if r != nil {
				_ = r.Close()
			}
			require.Error(t, err)
			require.NotContains(t, fmt.Sprintf("%v %+v", err, err), secret)
			rc, err := relay.NewReconciler(db, opt, relay.ReconcilerConfig{Window: time.Minute, Logger: logger})
			if rc != nil {
				_ = rc.Close()
			}
			require.Error(t, err)
			require.NotContains(t, fmt.Sprintf("%v %+v", err, err), secret)
			require.NotContains(t, logs.String(), secret)
		})
	}

	t.Run("LogsWhileRedisIsDown", func(t *testing.T) {
		t.Parallel()
		const password = "Rel4yS3cret-2"
		rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{Password: password, NoPersistence: true})
		db, _ := outboxtest.Schema(t)
		var logs lockedBuffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		r, err := relay.New(db, fromURL("redis://:"+password+"@"+rd.Addr()), relay.Config{
			Logger: logger, PollInterval: 20 * time.Millisecond, RoundBackoff: 10 * time.Millisecond, EnqueueTimeout: time.Second,
		})
		require.NoError(t, err)
		defer r.Close()
		rd.Stop(t)
		ev, err := model.NewEvent("order.placed", map[string]int{"order_id": 1})
		require.NoError(t, err)
		_, err = db.NewInsert().Model(ev).Exec(context.Background())
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		outboxtest.WaitFor(t, 20*time.Second, "a logged failure", func() bool {
			return strings.Contains(logs.String(), "failed")
		})
		cancel()
		require.NoError(t, <-done)
		require.NotContains(t, logs.String(), password)
	})
}
