package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/worker"
)

// TestInboxesOfSchemas: the Inboxes of two schemas (and the default one) record and dedupe each in its own
// table, without search_path; one event handled in two schemas runs in each; the cleaner of one schema
// deletes only that schema's records.
func TestInboxesOfSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	a := outboxtest.TenantSchema(t, db, "tenant_ia_")
	b := outboxtest.TenantSchema(t, db, "Tenant_IB_")
	count := func(table string) int {
		var n int
		require.NoError(t, db.NewRaw("SELECT count(*) FROM "+table).Scan(ctx, &n))
		return n
	}
	id := uuid.Must(uuid.NewV7())
	runs := map[string]int{}
	for _, s := range []string{a, b, ""} {
		in := worker.NewInbox(db, worker.WithLocation(model.Location{Schema: s}), worker.WithInboxLogger(outboxtest.Logger(t)))
		h := in.Handler("ship", func(context.Context, bun.Tx, *asynq.Task) error { runs[s]++; return nil })
		for range 2 {
			require.NoError(t, h.ProcessTask(ctx, inboxTask(t, id, `{}`)))
		}
	}
	require.Equal(t, map[string]int{a: 1, b: 1, "": 1}, runs, "once per schema, however often delivered")
	require.Equal(t, 1, count(`"`+a+`".inbox_events`))
	require.Equal(t, 1, count(`"`+b+`".inbox_events`))
	require.Equal(t, 1, count("inbox_events"))

	_, err := db.NewRaw(`UPDATE "` + a + `".inbox_events SET handled_at = now() - interval '30 days'`).Exec(ctx)
	require.NoError(t, err)
	_, err = db.NewRaw(`UPDATE "` + b + `".inbox_events SET handled_at = now() - interval '30 days'`).Exec(ctx)
	require.NoError(t, err)
	c, err := worker.NewInboxCleaner(worker.NewInbox(db, worker.WithLocation(model.Location{Schema: a})),
		worker.InboxCleanerConfig{Window: 48 * time.Hour, MaxRetry: 3, TaskTimeout: time.Minute})
	require.NoError(t, err)
	n, err := c.Cleanup(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 0, count(`"`+a+`".inbox_events`))
	require.Equal(t, 1, count(`"`+b+`".inbox_events`), "the cleaner of one schema leaves another's records")
}

// TestInboxRefusesABadSchema: an Inbox with a schema name that cannot be used safely fails every task
// (and its cleaner is refused), naming the value; nothing reaches the database.
func TestInboxRefusesABadSchema(t *testing.T) {
	t.Parallel()
	in := worker.NewInbox(outboxtest.Unconnected(t), worker.WithLocation(model.Location{Schema: "a'b"}), worker.WithInboxLogger(outboxtest.Logger(t)))
	err := in.Handler("ship", func(context.Context, bun.Tx, *asynq.Task) error { return nil }).
		ProcessTask(context.Background(), inboxTask(t, uuid.Must(uuid.NewV7()), `{}`))
	require.ErrorContains(t, err, `worker: WithLocation: model: Location.Schema: invalid schema name "a'b"`)
	_, err = worker.NewInboxCleaner(in, worker.InboxCleanerConfig{})
	require.ErrorContains(t, err, `invalid schema name "a'b"`)
}
