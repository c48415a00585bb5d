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

// TestInboxesOfTablePrefixes: the Inboxes of two table prefixes in ONE schema (and the schema's unprefixed
// one) record and dedupe each in its own table; one event handled by all three runs in each once; the
// cleaner of one prefix deletes only its records.
func TestInboxesOfTablePrefixes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	s := outboxtest.TenantSchema(t, db, "tenant_ip_")
	outboxtest.TenantTables(t, db, s, "orders_")
	outboxtest.TenantTables(t, db, s, "billing_")
	count := func(prefix string) int {
		var n int
		require.NoError(t, db.NewRaw(`SELECT count(*) FROM "`+s+`".`+prefix+"inbox_events").Scan(ctx, &n))
		return n
	}
	id := uuid.Must(uuid.NewV7())
	runs := map[string]int{}
	for _, p := range []string{"orders_", "billing_", ""} {
		in := worker.NewInbox(db, worker.WithLocation(model.Location{TablePrefix: p, Schema: s}), worker.WithInboxLogger(outboxtest.Logger(t)))
		h := in.Handler("ship", func(context.Context, bun.Tx, *asynq.Task) error { runs[p]++; return nil })
		for range 2 {
			require.NoError(t, h.ProcessTask(ctx, inboxTask(t, id, `{}`)))
		}
	}
	require.Equal(t, map[string]int{"orders_": 1, "billing_": 1, "": 1}, runs, "once per inbox, however often delivered")
	for _, p := range []string{"orders_", "billing_", ""} {
		require.Equal(t, 1, count(p), "the inbox of %q", p)
		_, err := db.NewRaw(`UPDATE "` + s + `".` + p + `inbox_events SET handled_at = now() - interval '30 days'`).Exec(ctx)
		require.NoError(t, err)
	}
	c, err := worker.NewInboxCleaner(worker.NewInbox(db, worker.WithLocation(model.Location{Schema: s, TablePrefix: "orders_"})),
		worker.InboxCleanerConfig{Window: 48 * time.Hour, MaxRetry: 3, TaskTimeout: time.Minute})
	require.NoError(t, err)
	n, err := c.Cleanup(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 0, count("orders_"))
	require.Equal(t, 1, count("billing_"), "the cleaner of one prefix leaves another's records")
	require.Equal(t, 1, count(""), "and the unprefixed inbox's")
}

// TestInboxRefusesABadTablePrefix: an Inbox with a table prefix bunbox refuses fails every task (and its
// cleaner is refused), naming the option and the value; nothing reaches the database.
func TestInboxRefusesABadTablePrefix(t *testing.T) {
	t.Parallel()
	in := worker.NewInbox(outboxtest.Unconnected(t), worker.WithLocation(model.Location{TablePrefix: "Orders"}), worker.WithInboxLogger(outboxtest.Logger(t)))
	err := in.Handler("ship", func(context.Context, bun.Tx, *asynq.Task) error { return nil }).
		ProcessTask(context.Background(), inboxTask(t, uuid.Must(uuid.NewV7()), `{}`))
	require.ErrorContains(t, err, `worker: WithLocation: model: Location.TablePrefix: invalid table prefix "Orders"`)
	_, err = worker.NewInboxCleaner(in, worker.InboxCleanerConfig{})
	require.ErrorContains(t, err, `invalid table prefix "Orders"`)
}
