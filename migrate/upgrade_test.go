package migrate_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	bunmigrate "github.com/uptrace/bun/migrate"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// migrateBefore applies, with bunbox's own migration tables, only the migrations that sort before
// name: the schema of an earlier bunbox release.
func migrateBefore(t *testing.T, db *bun.DB, name string) {
	t.Helper()
	old := fstest.MapFS{}
	all := bunboxmigrate.FS()
	files, err := fs.Glob(all, "*.sql")
	require.NoError(t, err)
	for _, f := range files {
		if f < name {
			data, err := fs.ReadFile(all, f)
			require.NoError(t, err)
			old[f] = &fstest.MapFile{Data: data}
		}
	}
	require.NotEmpty(t, old)
	ms := bunmigrate.NewMigrations()
	require.NoError(t, ms.Discover(old))
	m := bunmigrate.NewMigrator(db, ms, bunmigrate.WithTableName("bunbox_migrations"),
		bunmigrate.WithLocksTableName("bunbox_migration_locks"), bunmigrate.WithMarkAppliedOnSuccess(true))
	ctx := context.Background()
	require.NoError(t, m.Init(ctx))
	_, err = m.Migrate(ctx)
	require.NoError(t, err)
}

// The upgrade to the delivery options' schema keeps the rows already there, pending and published, and
// the relay delivers the pending ones afterwards; rolling it back keeps them too, and so does upgrading
// again.
func TestUpgradeToDeliveryOptionsKeepsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})
	migrateBefore(t, db, "20261201000003")

	columnExists := func(col string) bool {
		var ok bool
		require.NoError(t, db.NewRaw(`SELECT EXISTS (SELECT 1 FROM information_schema.columns
WHERE table_schema = ? AND table_name = 'outbox_events' AND column_name = ?)`, name, col).Scan(ctx, &ok))
		return ok
	}
	require.False(t, columnExists("process_at"))

	// Rows written by the previous release, which knows none of the new columns.
	queue := "upgrade_" + strings.ReplaceAll(name, "bunbox_test_", "")
	insertOld := func(n int) {
		t.Helper()
		for i := range n {
			_, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload)
VALUES (gen_random_uuid(), 'old.event', ?, ?)`, queue, fmt.Sprintf(`{"n":%d}`, i))
			require.NoError(t, err)
		}
	}
	insertOld(3)
	_, err := db.ExecContext(ctx, `UPDATE outbox_events SET published_at = now() WHERE id = (SELECT min(id) FROM outbox_events)`)
	require.NoError(t, err)

	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.True(t, columnExists("process_at"))
	require.EqualValues(t, 3, outboxtest.Count(t, db, "outbox_events", ""))
	require.EqualValues(t, 3, outboxtest.Count(t, db, "outbox_events",
		"process_at IS NULL AND max_retry IS NULL AND timeout_ns IS NULL AND deadline IS NULL AND task_group IS NULL AND retention_ns IS NULL"))

	// New rows carry options; the check constraints hold for rows written around NewEvent.
	ev, err := model.NewEvent("new.event", nil, model.WithQueue(queue), model.WithMaxRetry(2), model.WithTimeout(time.Minute))
	require.NoError(t, err)
	_, err = db.NewInsert().Model(ev).Exec(ctx)
	require.NoError(t, err)
	for _, bad := range []string{"max_retry = -1", "timeout_ns = 1", "retention_ns = 0", "task_group = ''", "task_group = '  '"} {
		_, err = db.ExecContext(ctx, "UPDATE outbox_events SET "+bad+" WHERE id = ?", ev.ID)
		require.ErrorContains(t, err, "check constraint", bad)
	}

	// The relay delivers the old pending rows and the new one.
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	ins := asynq.NewInspector(redis)
	t.Cleanup(func() { _ = ins.DeleteQueue(queue, true); _ = ins.Close() })
	relayAll(t, db, redis)
	info, err := ins.GetQueueInfo(queue)
	require.NoError(t, err)
	require.Equal(t, 3, info.Size, "two old pending rows and the new one")
	ti, err := ins.GetTaskInfo(queue, ev.EventID.String())
	require.NoError(t, err)
	require.Equal(t, 2, ti.MaxRetry)
	require.Equal(t, time.Minute, ti.Timeout)

	// Down one step (the upgrade was its own migration group, with the ordering and cancel migrations
	// that follow it): the columns go, the rows stay.
	m, err := bunboxmigrate.NewMigrator(db)
	require.NoError(t, err)
	group, err := m.Rollback(ctx)
	require.NoError(t, err)
	var names []string
	for _, mg := range group.Migrations {
		names = append(names, mg.Name)
	}
	require.ElementsMatch(t, []string{"20261201000003", "20261201000004", "20261202000001", "20261202000002", "20261204000001", "20261205000001", "20261206000001", "20261207000001", "20261208000001", "20261208000002", "20261209000001", "20261210000001", "20261211000001"}, names)
	require.False(t, columnExists("process_at"))
	require.False(t, columnExists("task_group"))
	require.EqualValues(t, 4, outboxtest.Count(t, db, "outbox_events", ""))
	var indexes int
	require.NoError(t, db.NewRaw("SELECT count(*) FROM pg_indexes WHERE schemaname = ? AND indexname = 'outbox_events_process_at_idx'", name).Scan(ctx, &indexes))
	require.Zero(t, indexes)
	insertOld(1) // the previous release writes again

	// And up again.
	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.True(t, columnExists("process_at"))
	require.EqualValues(t, 5, outboxtest.Count(t, db, "outbox_events", ""))
	status, err := bunboxmigrate.Status(ctx, db)
	require.NoError(t, err)
	require.Empty(t, status.Unapplied())
	relayAll(t, db, redis)
	info, err = ins.GetQueueInfo(queue)
	require.NoError(t, err)
	require.Equal(t, 4, info.Size)
}

// relayAll runs a relay until no row is pending, then stops it.
func relayAll(t *testing.T, db *bun.DB, redis asynq.RedisClientOpt) {
	t.Helper()
	// No reconciler: the fixtures mark rows published that never had a task, which it would deliver.
	r, err := relay.New(db, redis, relay.Config{PollInterval: 20 * time.Millisecond, DisableNotify: true, DisableReconciler: true,
		Logger: outboxtest.Logger(t)})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	outboxtest.WaitFor(t, 30*time.Second, "every row published", func() bool {
		return outboxtest.CountUndelivered(t, db, "") == 0
	})
	cancel()
	require.NoError(t, <-done)
}
