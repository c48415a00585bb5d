package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// The refusals of asynq's Client for the task itself are the task's own: each is made here by the real
// client, so a new asynq that words them differently fails this test rather than turning a poison row
// into an endless outage.
func TestTaskOwnErrorsOfAsynq(t *testing.T) {
	t.Parallel()
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}) // refuses before it talks to Redis
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	task := asynq.NewTask("test.event", nil)
	for name, enqueue := range map[string]func() error{
		"nil task":   func() error { _, err := c.EnqueueContext(ctx, nil); return err },
		"empty type": func() error { _, err := c.EnqueueContext(ctx, asynq.NewTask(" ", nil)); return err },
		"blank queue": func() error {
			_, err := c.EnqueueContext(ctx, task, asynq.Queue(" "))
			return err
		},
		"blank task id": func() error { _, err := c.EnqueueContext(ctx, task, asynq.TaskID(" ")); return err },
		"blank group":   func() error { _, err := c.EnqueueContext(ctx, task, asynq.Group(" ")); return err },
		"unique ttl": func() error {
			_, err := c.EnqueueContext(ctx, task, asynq.Unique(time.Millisecond))
			return err
		},
	} {
		err := enqueue()
		require.Error(t, err, name)
		require.True(t, taskOwn(err), "%s: %v", name, err)
		require.True(t, taskOwn(fmt.Errorf("listener email: %w", err)), "%s, wrapped: %v", name, err)
	}
	require.True(t, taskOwn(fmt.Errorf("listener email: %w", fmt.Errorf("%w: too big", ErrTaskRejected))))
	require.True(t, taskOwn(fmt.Errorf("%w: column payload is empty", errMalformedRow)))
}

// Every error that is not the task's own is an outage: whatever Redis, the network or a wrapper says.
func TestOutageErrorsAreNotTheTasks(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		errors.New("UNKNOWN: redis eval error: NOPERM User bunbox has no permissions to run the 'evalsha' command"),
		errors.New("UNKNOWN: redis eval error: NOPERM No permissions to access a key"),
		errors.New("WRONGPASS invalid username-password pair or user is disabled."),
		errors.New("NOAUTH Authentication required."),
		errors.New("ERR max number of clients reached"),
		errors.New("UNKNOWN: redis eval error: LOADING Redis is loading the dataset in memory"),
		errors.New("UNKNOWN: redis eval error: READONLY You can't write against a read only replica."),
		errors.New("UNKNOWN: redis eval error: MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
		errors.New("UNKNOWN: redis eval error: CLUSTERDOWN The cluster is down"),
		errors.New("UNKNOWN: redis eval error: OOM command not allowed when used memory > 'maxmemory'."),
		errors.New("UNKNOWN: redis eval error: ERR Error running script: user_script:1: something new"),
		errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"),
		errors.New("redis: connection pool timeout"),
		fmt.Errorf("UNKNOWN: redis eval error: %w", context.DeadlineExceeded),
		fmt.Errorf("listener email: %w", errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout")),
		fmt.Errorf("task %s conflicts: %w", "x", errors.New("the task vanished")),
		errors.New("bunbox: a wrapper's own error: queue name must contain one or more characters, it says"),
	} {
		require.False(t, taskOwn(err), err.Error())
	}
}

// aclUser makes a Redis ACL user with every right but those denied, and deletes it when the test ends.
func aclUser(t *testing.T, admin *redis.Client, denied ...string) (user, password string) {
	t.Helper()
	user, password = "bunbox_outage_"+randHex(4), randHex(12)
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + password, "~*", "&*", "+@all"}
	for _, d := range denied {
		args = append(args, "-"+d)
	}
	require.NoError(t, admin.Do(context.Background(), args...).Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	return user, password
}

// TestRedisRefusingEverythingChargesNoRow: a Redis that answers but refuses the relay (an ACL without
// EVALSHA/EVAL, a rotated password) is an outage. Rounds fail and back off, no row is charged or dies, and
// once Redis is fixed every event is delivered, once.
func TestRedisRefusingEverythingChargesNoRow(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	admin := redis.NewClient(&redis.Options{Addr: outboxtest.RedisAddr()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	for _, tt := range []struct {
		name       string
		breakRedis func(user, password string)
		fixRedis   func(user, password string)
		says       string
	}{
		{
			name: "ACL without EVALSHA",
			breakRedis: func(user, _ string) {
				require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "-evalsha", "-eval").Err())
			},
			fixRedis: func(user, _ string) {
				require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "+evalsha", "+eval").Err())
			},
			says: "NOPERM",
		},
		{
			name: "rotated password",
			breakRedis: func(user, _ string) {
				require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "resetpass", ">"+randHex(12)).Err())
				require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "USER", user).Err())
			},
			fixRedis: func(user, password string) {
				require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, ">"+password).Err())
			},
			says: "WRONGPASS",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			user, password := aclUser(t, admin)
			db, _ := outboxtest.Schema(t)
			opt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr(), Username: user, Password: password}
			b := setupWith(t, db, opt)
			logs := newLogRecorder(t)
			// The relay's own client, with its pipelining: the path a refusal takes in production.
			r, err := New(db, opt, Config{
				Logger: logs.logger(), MaxAttempts: 3, RetryBackoff: time.Millisecond, RetryBackoffMax: time.Millisecond,
				RoundBackoff: 10 * time.Millisecond, RoundBackoffMax: 40 * time.Millisecond, PollInterval: 20 * time.Millisecond,
				EnqueueTimeout: 2 * time.Second,
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = r.Close() })

			tt.breakRedis(user, password)
			events := insertEvents(t, db, b.queue, 10)
			run(t, r)
			outboxtest.WaitFor(t, time.Minute, "several failed rounds", func() bool {
				return len(logs.matching(roundBackoffLog)) >= 6
			})
			recs := logs.matching(roundBackoffLog)
			require.Contains(t, attr(recs[len(recs)-1], "err").String(), tt.says)
			require.Zero(t, outboxtest.Count(t, db, "outbox_events",
				"attempts > 0 OR dead_at IS NOT NULL OR (published_at IS NOT NULL AND published_at <> 'infinity') OR last_error IS NOT NULL"),
				"no row charged, dead or published during the outage")
			require.Empty(t, logs.matching("event is dead"))
			require.EqualValues(t, 0, r.Stats().Dead)

			tt.fixRedis(user, password)
			outboxtest.WaitFor(t, time.Minute, "all 10 delivered once Redis is fixed", func() bool {
				return published(t, db) == 10
			})
			require.Zero(t, outboxtest.Count(t, db, "outbox_events", "attempts > 0 OR dead_at IS NOT NULL"))
			requireDeliveredOnce(t, b.inspector, b.queue, events)
		})
	}
}

// optionEnqueuer adds options to the enqueue of chosen task ids: a way to make the real asynq client
// refuse one task as it would refuse a bad row.
type optionEnqueuer struct {
	Enqueuer
	extra map[string][]asynq.Option
}

func (e optionEnqueuer) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	for _, o := range opts {
		if o.Type() == asynq.TaskIDOpt {
			opts = append(opts, e.extra[o.Value().(string)]...)
		}
	}
	return e.Enqueuer.EnqueueContext(ctx, task, opts...)
}

// TestTaskAsynqRefusesEndsDead: a task that asynq itself refuses (here a blank group) is the row's own
// failure: charged each round, dead after MaxAttempts, and the rows around it delivered meanwhile.
func TestTaskAsynqRefusesEndsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	poison := insertEvents(t, b.db, b.queue, 1)[0]
	others := insertEvents(t, b.db, b.queue, 50)
	r := b.newRelay(t, Config{
		Enqueuer:    optionEnqueuer{b.enq, map[string][]asynq.Option{poison.EventID.String(): {asynq.Group(" ")}}},
		MaxAttempts: 3, RetryBackoff: time.Millisecond, RetryBackoffMax: 5 * time.Millisecond, BatchSize: 20,
	})
	run(t, r)
	outboxtest.WaitFor(t, time.Minute, "the others published and the poison row dead", func() bool {
		return published(t, b.db) == 50 && outboxtest.Count(t, b.db, "outbox_events", "dead_at IS NOT NULL") == 1
	})
	var row model.Event
	require.NoError(t, b.db.NewSelect().Model(&row).Where("event_id = ?", poison.EventID).Scan(context.Background()))
	require.Equal(t, 3, row.Attempts)
	require.Contains(t, row.LastError, "group key cannot be empty")
	require.Equal(t, 3, b.enq.count(poison.EventID.String()))
	require.Empty(t, b.logs.matching(roundBackoffLog), "a task's own failure is not an outage")
	requireDeliveredOnce(t, b.inspector, b.queue, others)
}

// Every enqueue outcome is classified once, into one of a closed set, whichever way its row was read.
func TestClassify(t *testing.T) {
	t.Parallel()
	redisDown := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	for _, tt := range []struct {
		name string
		err  error
		want outcome
	}{
		{"Delivered", nil, delivered},
		{"Released", errReleased, released},
		{"ReleasedWrapped", fmt.Errorf("decode: %w", errReleased), released},
		{"HandedOver", errHandOver, handedOver},
		{"Cancelled", errCancelled, cancelled},
		{"Malformed", fmt.Errorf("%w: column payload is empty", errMalformedRow), charged},
		{"Rejected", fmt.Errorf("%w: too large", ErrTaskRejected), charged},
		{"AsynqRefusal", errors.New("task ID cannot be empty"), charged},
		{"Outage", redisDown, outage},
		{"Timeout", context.DeadlineExceeded, outage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, classify(tt.err))
		})
	}
}

// A batch's outcomes are tallied by classify, and only the task's own failures are charged: an attempt
// with the retry's delay, dead at the last attempt or at once for a malformed row; an outage charges none.
func TestTallyBatchCharges(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxAttempts: 3}.withDefaults()
	events := make([]model.Event, 7)
	for i := range events {
		events[i].ID = int64(i + 1)
	}
	events[2].Attempts = 2 // its third attempt is its last
	rejected := fmt.Errorf("%w: no", ErrTaskRejected)
	errs := []error{nil, rejected, rejected, fmt.Errorf("%w: bad", errMalformedRow), errors.New("redis down"),
		errReleased, errCancelled}
	tl := tallyBatch(&cfg, events, errs, map[int]bool{6: true})
	require.Equal(t, 1, tl.delivered)
	require.Equal(t, []int{5}, tl.released)
	require.Equal(t, []int{6}, tl.cancels)
	require.Equal(t, []int{4}, tl.outages)
	require.EqualError(t, tl.outage, "redis down")
	require.Len(t, tl.charges, 3)
	require.Equal(t, 1, tl.charges[0].i)
	require.False(t, tl.charges[0].Dead)
	require.Equal(t, 1, tl.charges[0].Attempts)
	require.Positive(t, tl.charges[0].Delay)
	require.True(t, tl.charges[1].Dead, "the last attempt")
	require.Equal(t, 3, tl.charges[1].Attempts)
	require.True(t, tl.charges[2].Dead, "a malformed row")

	var res BatchEvent
	tl.failOutage(&res)
	require.Equal(t, 1, res.Released)
	require.ErrorContains(t, res.Err, "enqueue: 1 rows released, none charged: redis down")
}
