package relay

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// A database with the stream on, moved with pg_dump and pg_restore to another cluster whose transaction
// id counter is behind the source's (a fresh cluster) or ahead of it: the events delivered before the move
// are not enqueued again, the ones waiting at the move and the ones written on the new cluster before a
// relay ran there are each delivered once, and so are those written after. Before the relay told the
// clusters apart, every event written on a cluster behind the source's was skipped without a word.
func TestStreamRestoreIntoAnotherCluster(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	const sourceXid = 3 << 20
	for _, tc := range []struct {
		name   string
		target uint64 // the target cluster's next xid; 0: a fresh cluster's (a few hundred)
	}{
		{"counter behind", 0},
		{"counter ahead", 6 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src := outboxtest.StartPostgres(t)
			src.SetNextXid(t, sourceXid)
			srcDB := src.Schema(t)
			require.NoError(t, EnableStream(ctx, srcDB, model.Location{}))
			b := setupWith(t, srcDB, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()})

			delivered := recordEvents(t, bunx.New(srcDB), srcDB, b.queue, 100)
			stop := run(t, b.newRelay(t, Config{BatchSize: 40, DisableReconciler: true}))
			b.waitQueued(t, len(delivered))
			outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
				return countStream(t, srcDB).Delivered == int64(len(delivered))
			})
			stop()
			waiting := recordEvents(t, bunx.New(srcDB), srcDB, b.queue, 50)

			dst := outboxtest.StartPostgres(t)
			if tc.target > 0 {
				dst.SetNextXid(t, tc.target)
			}
			src.RestoreInto(t, dst)
			t.Logf("next xid: source %d, target %d", src.NextXid(t), dst.NextXid(t))
			dstDB := dst.Open(t, nil)
			dstOutbox := bunx.New(dstDB)
			before := recordEvents(t, dstOutbox, dstDB, b.queue, 60) // written before any relay runs there

			b.db = dstDB
			run(t, b.newRelay(t, Config{BatchSize: 40, DisableReconciler: true}))
			outboxtest.WaitFor(t, streamWait, "the cursor started anew", func() bool {
				return len(b.logs.matching("runs on another cluster")) > 0
			})
			after := recordEvents(t, dstOutbox, dstDB, b.queue, 40)
			all := append(append(append(append([]*model.Event{}, delivered...), waiting...), before...), after...)
			b.waitQueued(t, len(all))
			outboxtest.WaitFor(t, streamWait, "every row delivered", func() bool {
				c := countStream(t, dstDB)
				return c.Waiting == 0 && outboxtest.Count(t, dstDB, "outbox_events", "published_at IS NULL") == 0
			})
			requireDeliveredOnce(t, b.inspector, b.queue, all)
			b.requireEnqueuedOnce(t, all)
			resets := b.logs.matching("runs on another cluster")
			require.Len(t, resets, 1, "the relay said once that the cursor started anew")
			require.EqualValues(t, len(waiting)+len(before), attr(resets[0], "handed_over").Int64(),
				"the rows waiting at the move and those written before the relay ran were handed over")
		})
	}
}

// clusterChange tells a cursor of another cluster or id space from its own.
func TestStreamClusterChange(t *testing.T) {
	t.Parallel()
	cur := func(cursorSys, sys int64, from, to, xmax string) streamCursor {
		c := streamCursor{Xmax: xmax}
		c.From.String, c.From.Valid = from, from != ""
		c.To.String, c.To.Valid = to, to != ""
		c.CursorSystem.Int64, c.CursorSystem.Valid = cursorSys, cursorSys != 0
		c.System.Int64, c.System.Valid = sys, true
		return c
	}
	require.Empty(t, clusterChange(cur(7, 7, "100:105:101", "", "105")))
	require.Empty(t, clusterChange(cur(7, 7, "100:105:101", "110:120:", "125")))
	require.Contains(t, clusterChange(cur(7, 8, "100:105:101", "", "900")), "system identifier 8, the cursor's 7")
	require.Contains(t, clusterChange(cur(7, 7, "100:105:101", "", "104")), "next transaction id 104, behind the cursor's 105")
	require.Contains(t, clusterChange(cur(7, 7, "100:105:101", "110:120:", "119")), "behind the cursor's 120")
	require.Contains(t, clusterChange(cur(0, 7, "100:105:", "", "200")), "no system identifier")
}

// A cursor recorded on another system (as after a restore), in a schema and with a table prefix, and with
// a role that may not delete the reconciler's time marks: the first stream round starts it anew, hands the
// rows waiting at the change to the per-row path, says the marks stay, and every row is delivered once.
func TestStreamCursorOfAnotherSystemInATenant(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	base := setup(t)
	db := base.db
	schema := outboxtest.TenantSchema(t, db, "tenant_sys_")
	outboxtest.TenantTables(t, db, schema, "orders_")
	cfg := Config{Location: model.Location{Schema: schema, TablePrefix: "orders_"}, BatchSize: 40, DisableReconciler: true}
	require.NoError(t, EnableStream(ctx, db, cfg.Location))
	b := &streamBundle{testBundle: base, ob: bunx.New(db, bunx.WithLocation(model.Location{Schema: schema, TablePrefix: "orders_"}))}
	names := mustNames(model.Location{Schema: schema, TablePrefix: "orders_"})
	delivered := b.record(t, db, 60)
	stop := run(t, b.newRelay(t, cfg))
	b.waitQueued(t, len(delivered))
	count := func(where string) int64 {
		var n int64
		require.NoError(t, db.NewRaw(names.SQL(`SELECT count(*) FROM outbox_events e `+streamsql.Cursor+` WHERE `+where)).Scan(ctx, &n))
		return n
	}
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return count(streamsql.Delivered) == int64(len(delivered))
	})
	stop()
	waiting := b.record(t, db, 30)
	_, err := db.ExecContext(ctx, names.SQL(`UPDATE bunbox_stream_positions SET system_id = system_id + 1`))
	require.NoError(t, err)

	role := "bunbox_nomarks_" + randHex(4)
	for _, q := range []string{
		`CREATE ROLE ` + role,
		`GRANT USAGE ON SCHEMA "` + schema + `" TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "` + schema + `" TO ` + role,
		`REVOKE DELETE ON ` + names.Qualify("bunbox_stream_marks") + ` FROM ` + role,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA "` + schema + `" TO ` + role,
	} {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), `DROP OWNED BY `+role)
		_, _ = db.ExecContext(context.Background(), `DROP ROLE `+role)
	})
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `SET LOCAL ROLE `+role)
	require.NoError(t, err)
	cur, ok, err := store.NewStream(names).LockCursor(ctx, tx, false)
	require.NoError(t, err)
	require.True(t, ok)
	r := b.newRelay(t, cfg)
	moved, err := r.rounds.stream.cluster(ctx, tx, cur)
	require.NoError(t, err)
	require.True(t, moved, "the cursor of another system started anew")
	resets := b.logs.matching("runs on another cluster")
	require.Len(t, resets, 1)
	require.EqualValues(t, len(waiting), attr(resets[0], "handed_over").Int64())
	require.Len(t, b.logs.matching("may not delete the reconciler's time marks"), 1)

	run(t, r)
	all := append(append([]*model.Event{}, delivered...), waiting...)
	b.waitQueued(t, len(all))
	outboxtest.WaitFor(t, streamWait, "the handed-over rows published", func() bool {
		return count("e.published_at IS NULL") == 0
	})
	requireDeliveredOnce(t, b.inspector, b.queue, all)
	b.requireEnqueuedOnce(t, all)
}
