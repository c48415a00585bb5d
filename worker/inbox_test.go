package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/worker"
)

var errBusiness = errors.New("business rule failed")

type shipment struct {
	OrderID int64 `json:"order_id"`
}

func inboxTask(t *testing.T, id uuid.UUID, payload string) *asynq.Task {
	t.Helper()
	return asynq.NewTaskWithHeaders("order.placed", []byte(payload), map[string]string{wire.HeaderEventID: id.String()})
}

func TestInboxRunsTheWorkOncePerEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	_, err := db.ExecContext(ctx, "CREATE TABLE shipments (order_id bigint NOT NULL)")
	require.NoError(t, err)
	in := worker.NewInbox(db, worker.WithInboxLogger(outboxtest.Logger(t)))

	var calls atomic.Int64
	ship := worker.HandleJSON(in, "ship", func(ctx context.Context, tx bun.Tx, p *shipment) error {
		calls.Add(1)
		_, err := tx.NewRaw("INSERT INTO shipments VALUES (?)", p.OrderID).Exec(ctx)
		return err
	})
	id := uuid.Must(uuid.NewV7())
	task := inboxTask(t, id, `{"order_id":7}`)

	// Redelivered ten times, four of them at once: the effect happens once.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { require.NoError(t, ship.ProcessTask(ctx, task)) })
	}
	wg.Wait()
	for range 6 {
		require.NoError(t, ship.ProcessTask(ctx, task))
	}
	require.EqualValues(t, 1, outboxtest.Count(t, db, "shipments", ""))
	require.EqualValues(t, 1, calls.Load())

	// Another handler of the same event runs on its own.
	audit := in.Handler("audit", func(context.Context, bun.Tx, *asynq.Task) error { return nil })
	require.NoError(t, audit.ProcessTask(ctx, task))
	require.EqualValues(t, 2, outboxtest.Count(t, db, "inbox_events", "event_id = ?", id))
}

func TestInboxFailedWorkRollsBackAndRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	in := worker.NewInbox(db)
	fail := true
	h := in.Handler("flaky", func(ctx context.Context, tx bun.Tx, _ *asynq.Task) error {
		if fail {
			return errBusiness
		}
		return nil
	})
	task := inboxTask(t, uuid.New(), `{}`)
	require.ErrorIs(t, h.ProcessTask(ctx, task), errBusiness)
	require.Zero(t, outboxtest.Count(t, db, "inbox_events", ""), "a failed attempt leaves no record")
	fail = false
	require.NoError(t, h.ProcessTask(ctx, task))
	require.EqualValues(t, 1, outboxtest.Count(t, db, "inbox_events", ""))
}

func TestInboxRejectsMalformedTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	in := worker.NewInbox(db)
	h := worker.HandleJSON(in, "ship", func(context.Context, bun.Tx, *shipment) error { return nil })

	for name, task := range map[string]*asynq.Task{
		"NoHeader":   asynq.NewTask("order.placed", []byte(`{}`)),
		"BadHeader":  asynq.NewTaskWithHeaders("order.placed", []byte(`{}`), map[string]string{wire.HeaderEventID: "nope"}),
		"NilID":      inboxTask(t, uuid.Nil, `{}`),
		"BadPayload": inboxTask(t, uuid.New(), `{"order_id":"seven"}`),
	} {
		err := h.ProcessTask(ctx, task)
		require.ErrorIs(t, err, worker.ErrMalformedTask, name)
		require.True(t, errors.Is(err, asynq.SkipRetry), "%s: archived, not retried forever", name)
	}
	require.Zero(t, outboxtest.Count(t, db, "inbox_events", ""))
}

func TestInboxMissingMigration(t *testing.T) {
	t.Parallel()
	db := outboxtest.Open(t, map[string]any{"search_path": outboxtest.NewSchema(t)})
	h := worker.NewInbox(db).Handler("h", func(context.Context, bun.Tx, *asynq.Task) error { return nil })
	err := h.ProcessTask(context.Background(), inboxTask(t, uuid.New(), `{}`))
	require.ErrorContains(t, err, "the inbox table is missing: apply the migrations")
}
