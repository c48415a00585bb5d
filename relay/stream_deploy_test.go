package relay

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	bunmigrate "github.com/uptrace/bun/migrate"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/streamsql"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// newLegacyRelay is a relay that behaves as the release before the stream: it never streams and never
// reads bunbox_stream (the rolling deploy).
func (b *streamBundle) newLegacyRelay(t *testing.T, cfg Config) *Relay {
	t.Helper()
	r := b.newRelay(t, cfg)
	r.stream.legacy = true
	return r
}

// (h) The rolling deploy: a relay of the previous release beside one that streams, on an outbox with the
// stream on, delivers every row once; alone, it leaves the streamed rows where they are (neither
// delivered nor lost), and a streaming relay started later delivers them.
func TestStreamRollingDeploy(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	require.NoError(t, DisableStream(ctx, b.db, model.Location{}))
	classic := b.record(t, b.db, 50) // written while the stream is off: the per-row path's
	require.NoError(t, EnableStream(ctx, b.db, model.Location{}))
	streamed := b.record(t, b.db, 100)

	old := b.newLegacyRelay(t, Config{DisableReconciler: true})
	stopOld := run(t, old)
	b.waitQueued(t, len(classic))
	requireDeliveredOnce(t, b.inspector, b.queue, classic)
	more := b.record(t, b.db, 20) // with the old relay idle: the wake-up and the poll both find nothing
	reads := old.wake.Reads.Load()
	outboxtest.WaitFor(t, streamWait, "the old relay looking after the rows committed", func() bool {
		return old.wake.Reads.Load() > reads+20
	})
	streamed = append(streamed, more...)
	c := countStream(t, b.db)
	require.EqualValues(t, len(streamed), c.Waiting, "the streamed rows wait, untouched")
	require.Zero(t, c.Updated)
	for _, ev := range streamed {
		require.Zero(t, b.enq.count(ev.EventID.String()), "the old relay enqueued a streamed row")
	}

	// The new release arrives: both run, then the old one goes.
	run(t, b.newRelay(t, Config{BatchSize: 30, DisableReconciler: true}))
	streamed = append(streamed, b.record(t, b.db, 80)...)
	classic = append(classic, insertClassic(t, b, 10)...)
	all := append(append([]*model.Event{}, classic...), streamed...)
	b.waitQueued(t, len(all))
	stopOld()
	outboxtest.WaitFor(t, streamWait, "the cursor past every streamed row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(streamed))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, all)
	b.requireEnqueuedOnce(t, all)
}

// insertClassic writes n rows of the per-row path (published_at NULL) while the stream is on, as the
// stream's hand-over leaves them. The rows are written and handed over in one transaction: a streaming
// relay must never see them in the stream, or it would deliver them there before they are handed over,
// and the per-row path a second time (the test's race, not the relay's: the stream hands a row over only
// from a round that holds the cursor, and DisableStream only the rows still waiting).
func insertClassic(t *testing.T, b *streamBundle, n int) []*model.Event {
	t.Helper()
	var events []*model.Event
	require.NoError(t, b.db.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
		events = b.record(t, tx, n)
		ids := make([]int64, 0, n)
		for _, ev := range events {
			ids = append(ids, ev.ID)
		}
		_, err := tx.NewRaw("UPDATE outbox_events SET published_at = NULL WHERE id = ANY(?)", pgdialect.Array(ids)).
			Exec(ctx)
		return err
	}))
	return events
}

// migrateBefore applies the bunbox migrations whose names sort before name.
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
	ms := bunmigrate.NewMigrations()
	require.NoError(t, ms.Discover(old))
	m := bunmigrate.NewMigrator(db, ms, bunmigrate.WithTableName("bunbox_migrations"),
		bunmigrate.WithLocksTableName("bunbox_migration_locks"), bunmigrate.WithMarkAppliedOnSuccess(true))
	ctx := context.Background()
	require.NoError(t, m.Init(ctx))
	_, err = m.Migrate(ctx)
	require.NoError(t, err)
}

// (i) The upgrade: rows pending in a database of the release before the stream (20261204000001), then the
// stream's migration and EnableStream: the old rows (per-row path) and the new streamed ones are each
// delivered once.
func TestStreamUpgradeDeliversOldAndNewRows(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	name := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": name})
	migrateBefore(t, db, "20261205000001")
	b := &streamBundle{testBundle: setupWith(t, db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})}
	b.ob = bunx.New(db)
	pending := b.record(t, db, 70)
	require.NoError(t, bunboxmigrate.Up(ctx, db))
	require.NoError(t, EnableStream(ctx, db, model.Location{}))
	streamed := b.record(t, db, 90)
	require.EqualValues(t, len(pending), outboxtest.Count(t, db, "outbox_events", "published_at IS NULL"))
	require.EqualValues(t, len(streamed), countStream(t, db).Waiting)
	run(t, b.newRelay(t, Config{BatchSize: 40}))
	all := append(append([]*model.Event{}, pending...), streamed...)
	b.waitQueued(t, len(all))
	outboxtest.WaitFor(t, streamWait, "every row delivered", func() bool {
		c := countStream(t, db)
		return c.Delivered == int64(len(streamed)) &&
			outboxtest.Count(t, db, "outbox_events", "published_at IS NULL") == 0
	})
	requireDeliveredOnce(t, b.inspector, b.queue, all)
	b.requireEnqueuedOnce(t, all)
}

// (j) DisableStream while streamed rows wait: the per-row path delivers them, once.
func TestStreamDisableWhileRowsWait(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	events := b.record(t, b.db, 80)
	r := b.newRelay(t, Config{BatchSize: 30})
	stop := run(t, r)
	b.waitQueued(t, len(events))
	stop()
	waiting := b.record(t, b.db, 60)
	require.EqualValues(t, len(waiting), countStream(t, b.db).Waiting)
	require.NoError(t, DisableStream(ctx, b.db, model.Location{}))
	require.EqualValues(t, len(waiting), outboxtest.Count(t, b.db, "outbox_events", "published_at IS NULL"))
	after := b.record(t, b.db, 10)
	run(t, b.newRelay(t, Config{BatchSize: 30}))
	all := append(append(append([]*model.Event{}, events...), waiting...), after...)
	b.waitQueued(t, len(all))
	outboxtest.WaitFor(t, streamWait, "every row published", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "published_at IS NULL") == 0
	})
	requireDeliveredOnce(t, b.inspector, b.queue, all)
	b.requireEnqueuedOnce(t, all)
	c := countStream(t, b.db)
	require.EqualValues(t, len(events), c.Delivered, "the rows delivered before stay delivered")
	require.EqualValues(t, len(waiting)+len(after), c.Classic)
}

// (k) A streamed row cancelled while it waits is never enqueued, and its cancel is settled as never
// published; one cancelled after the stream delivered it is taken back out of asynq.
func TestStreamCancelOfWaitingRow(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	events := b.record(t, b.db, 30)
	var ids []uuid.UUID
	for _, ev := range events[:10] {
		ids = append(ids, ev.EventID)
	}
	require.NoError(t, b.ob.Cancel(ctx, b.db, ids...))
	r := b.newRelay(t, Config{CancelCheckInterval: 20 * time.Millisecond})
	run(t, r)
	b.waitQueued(t, len(events)-10)
	outboxtest.WaitFor(t, streamWait, "the cancels settled", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "cancel_settled_at IS NOT NULL AND cancel_result = ?", cancelNeverPublished) == 10
	})
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Waiting == 0
	})
	for _, ev := range events[:10] {
		require.Zero(t, b.enq.count(ev.EventID.String()), "a cancelled row was enqueued")
	}
	requireDeliveredOnce(t, b.inspector, b.queue, events[10:])

	// A delivered streamed row: its task is taken back.
	late := events[10:12]
	require.NoError(t, b.ob.Cancel(ctx, b.db, late[0].EventID, late[1].EventID))
	outboxtest.WaitFor(t, streamWait, "the delivered rows' cancels settled", func() bool {
		return outboxtest.Count(t, b.db, "outbox_events", "cancel_settled_at IS NOT NULL AND cancel_result = ?", cancelRemoved) == 2
	})
	info, err := b.inspector.GetQueueInfo(b.queue)
	require.NoError(t, err)
	require.Equal(t, len(events)-12, info.Size)
}

// (l) The stream in a schema and with a table prefix.
func TestStreamSchemaAndTablePrefix(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	base := setup(t)
	db := base.db
	schema := outboxtest.TenantSchema(t, db, "tenant_st_")
	outboxtest.TenantTables(t, db, schema, "orders_")
	cfg := Config{Location: model.Location{Schema: schema, TablePrefix: "orders_"}}
	require.NoError(t, DisableStream(ctx, db, model.Location{Schema: schema}))
	require.NoError(t, EnableStream(ctx, db, cfg.Location))
	on, err := StreamEnabled(ctx, db, cfg.Location)
	require.NoError(t, err)
	require.True(t, on)
	off, err := StreamEnabled(ctx, db, model.Location{Schema: schema})
	require.NoError(t, err)
	require.False(t, off, "the schema's unprefixed outbox is another outbox")
	b := &streamBundle{testBundle: base, ob: bunx.New(db, bunx.WithLocation(model.Location{Schema: schema, TablePrefix: "orders_"}))}
	events := b.record(t, db, 120)
	cfg.BatchSize = 50
	run(t, b.newRelay(t, cfg))
	b.waitQueued(t, len(events))
	names := mustNames(model.Location{Schema: schema, TablePrefix: "orders_"})
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		var n int64
		require.NoError(t, db.NewRaw(names.SQL(`SELECT count(*) FROM outbox_events e `+streamsql.Cursor+
			` WHERE `+streamsql.Delivered)).Scan(ctx, &n))
		return n == int64(len(events))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	b.requireEnqueuedOnce(t, events)
}
