package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/relayenv"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// prefixed is one outbox of the table-prefix tests: its schema, its table prefix ("" for the schema's
// unprefixed tables), its events and its relay's enqueuer.
type prefixed struct {
	schema, prefix string
	events         []*model.Event
	enq            *tenantEnqueuer
}

// table returns the outbox's table name (outbox_events, inbox_events, bunbox_leases) as SQL.
// allEnqueued reports whether every event has its task in queue.
func allEnqueued(ins *asynq.Inspector, queue string, events []*model.Event) bool {
	for _, ev := range events {
		if _, err := ins.GetTaskInfo(queue, ev.EventID.String()); err != nil {
			return false
		}
	}
	return true
}

func (p *prefixed) table(name string) string { return `"` + p.schema + `".` + p.prefix + name }

func (p *prefixed) count(t *testing.T, db bun.IDB, where string) int {
	t.Helper()
	var n int
	require.NoError(t, db.NewRaw("SELECT count(*) FROM "+p.table("outbox_events")+" WHERE "+where).Scan(context.Background(), &n))
	return n
}

func (p *prefixed) record(t *testing.T, db *bun.DB, queue string, n int) {
	t.Helper()
	ob := bunx.New(db, bunx.WithLocation(model.Location{Schema: p.schema, TablePrefix: p.prefix}))
	var events []*model.Event
	for i := range n {
		ev, err := model.NewEvent("prefixed.event", map[string]any{"prefix": p.prefix, "n": i}, model.WithQueue(queue))
		require.NoError(t, err)
		events = append(events, ev)
	}
	require.NoError(t, ob.Record(context.Background(), db, events...))
	p.events = append(p.events, events...)
}

// threeOutboxes migrates three outboxes into one schema: its unprefixed tables, orders_ and billing_.
func threeOutboxes(t *testing.T, db *bun.DB, client *asynq.Client) []*prefixed {
	t.Helper()
	s := outboxtest.TenantSchema(t, db, "tenant_p_")
	outboxes := []*prefixed{{schema: s}, {schema: s, prefix: "orders_"}, {schema: s, prefix: "billing_"}}
	for _, p := range outboxes {
		if p.prefix != "" {
			outboxtest.TenantTables(t, db, s, p.prefix)
		}
		p.enq = &tenantEnqueuer{client: client, ids: map[string]int{}}
	}
	return outboxes
}

// TestRelaysOfTablePrefixes runs three outboxes in ONE schema, each with its relay and its reconciler:
// the schema's unprefixed tables and two with table prefixes (orders_, billing_), all on one asynq
// queue. Each relay delivers exactly its own rows, once; each reconciler holds the lease in its own
// leases table; the cleanup of one (a short PublishedRetention) deletes only its own rows; a duplicate
// event id is still told apart in a prefixed table (its unique constraint is prefixed too). No
// search_path is involved, so this runs through the pooler too.
func TestRelaysOfTablePrefixes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t) // in the pooler pass a database of its own
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	ins := asynq.NewInspector(redis)
	queue := outboxtest.RandomName("prefixes_")
	t.Cleanup(func() {
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	})
	client := asynq.NewClient(redis)
	t.Cleanup(func() { _ = client.Close() })
	outboxes := threeOutboxes(t, db, client)
	const n = 30
	for _, p := range outboxes {
		p.record(t, db, queue, n)
	}
	err := bunx.New(db, bunx.WithLocation(model.Location{Schema: outboxes[1].schema, TablePrefix: "orders_"})).
		Record(ctx, db, outboxes[1].events[0])
	require.ErrorIs(t, err, bunx.ErrDuplicateEvent, "the prefixed unique constraint")

	for i, p := range outboxes {
		cfg := relay.Config{Location: model.Location{Schema: p.schema, TablePrefix: p.prefix}, Enqueuer: p.enq, PollInterval: 50 * time.Millisecond,
			RoundBackoff: 10 * time.Millisecond, Logger: outboxtest.Logger(t), PreparedStatements: !outboxtest.Pooled()}
		if i == 1 { // the cleanup of orders_ deletes its rows as soon as it runs
			cfg.PublishedRetention, cfg.CleanupInterval = time.Nanosecond, 50*time.Millisecond
		}
		r, err := relay.New(db, redis, cfg)
		require.NoError(t, err, "relay of %q", p.prefix)
		require.Equal(t, p.prefix, r.Location().TablePrefix)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		t.Cleanup(func() {
			cancel()
			require.NoError(t, <-done)
			_ = r.Close()
		})
	}

	for _, p := range outboxes {
		outboxtest.WaitFor(t, 60*time.Second, fmt.Sprintf("the relay of %q enqueued its %d events", p.prefix, n), func() bool {
			return len(p.enq.enqueued()) >= n
		})
	}
	for _, p := range outboxes {
		got := p.enq.enqueued()
		for _, ev := range p.events {
			require.Equal(t, 1, got[ev.EventID.String()], "the relay of %q enqueued its event %s once", p.prefix, ev.EventID)
		}
		require.Len(t, got, n, "the relay of %q enqueued nothing but its own events", p.prefix)
	}
	qi, err := ins.GetQueueInfo(queue)
	require.NoError(t, err)
	require.Equal(t, 3*n, qi.Size, "the queue holds the tasks of the three outboxes, once each")

	outboxtest.WaitFor(t, 60*time.Second, "the cleanup of orders_ deleted its published rows", func() bool {
		return outboxes[1].count(t, db, "true") == 0
	})
	outboxtest.WaitFor(t, 60*time.Second, "the other relays marked their rows published", func() bool {
		return outboxes[0].count(t, db, "published_at IS NOT NULL") == n && outboxes[2].count(t, db, "published_at IS NOT NULL") == n
	})
	require.Equal(t, n, outboxes[0].count(t, db, "true"), "the cleanup of orders_ leaves the schema's unprefixed rows")
	require.Equal(t, n, outboxes[2].count(t, db, "true"), "and billing_'s")

	for _, p := range outboxes {
		outboxtest.WaitFor(t, 60*time.Second, fmt.Sprintf("the reconciler of %q holds the lease in its own table", p.prefix), func() bool {
			var held int
			require.NoError(t, db.NewRaw("SELECT count(*) FROM "+p.table("bunbox_leases")+" WHERE name = 'bunbox.reconciler' AND expires_at > now()").Scan(ctx, &held))
			return held == 1
		})
	}
}

// TestReconcilersOfTablePrefixes loses the tasks of some events of one prefixed outbox from Redis: its
// reconciler requeues exactly them; that of the other outbox of the same schema, and that of the
// schema's unprefixed one, find nothing missing and change nothing.
func TestReconcilersOfTablePrefixes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	ins := asynq.NewInspector(redis)
	queue := outboxtest.RandomName("prefixes_reconcile_")
	t.Cleanup(func() {
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	})
	outboxes := threeOutboxes(t, db, nil)
	const n = 10
	for _, p := range outboxes {
		p.record(t, db, queue, n)
		r, err := relay.New(db, redis, relay.Config{Location: model.Location{Schema: p.schema, TablePrefix: p.prefix}, PollInterval: 20 * time.Millisecond,
			DisableNotify: true, DisableReconciler: true, Logger: outboxtest.Logger(t)})
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		outboxtest.WaitFor(t, 60*time.Second, "every row of "+p.table("outbox_events")+" enqueued", func() bool {
			return allEnqueued(ins, queue, p.events)
		})
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, r.Close())
	}
	for _, ev := range outboxes[2].events[:3] {
		require.NoError(t, ins.DeleteTask(queue, ev.EventID.String()))
	}
	for _, tc := range []struct {
		p       *prefixed
		missing int
	}{{outboxes[0], 0}, {outboxes[1], 0}, {outboxes[2], 3}} {
		rc, err := relay.NewReconciler(db, redis, relay.ReconcilerConfig{Location: model.Location{Schema: tc.p.schema, TablePrefix: tc.p.prefix}, Logger: outboxtest.Logger(t)})
		require.NoError(t, err)
		res, err := rc.ReconcileOnce(ctx)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		require.Equal(t, n, res.Checked, "the reconciler of %q checks its own rows", tc.p.prefix)
		require.Equal(t, tc.missing, res.Missing, "prefix %q", tc.p.prefix)
		require.Equal(t, tc.missing, res.Requeued, "prefix %q", tc.p.prefix)
		require.Equal(t, tc.missing, tc.p.count(t, db, "published_at IS NULL"), "prefix %q", tc.p.prefix)
	}
}

// TestNotifyTriggerOfTablePrefixes installs the NOTIFY trigger of two outboxes of one schema: each has
// its own function, which notifies its own channel; a listener on one outbox's channel (on a direct
// connection: LISTEN needs a session) hears an insert into it and not one into the other.
func TestNotifyTriggerOfTablePrefixes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.Open(t, nil)
	outboxes := threeOutboxes(t, db, nil)
	for _, p := range outboxes[1:] {
		cfg := relay.Config{Location: model.Location{Schema: p.schema, TablePrefix: p.prefix}}
		require.NoError(t, relay.EnableNotifyTrigger(ctx, db, cfg.Location))
		require.NoError(t, relay.EnableNotifyTrigger(ctx, db, cfg.Location), "idempotent")
		require.NoError(t, relay.CheckSchema(ctx, db, cfg.Location))
		var src string
		require.NoError(t, db.NewRaw(`SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			JOIN pg_trigger tg ON tg.tgfoid = p.oid JOIN pg_class c ON c.oid = tg.tgrelid
			WHERE n.nspname = ? AND c.relname = ? AND c.relnamespace = n.oid AND tg.tgname = 'bunbox_outbox_notify'
			AND p.proname = ?`, p.schema, p.prefix+"outbox_events", p.prefix+"bunbox_outbox_notify").Scan(ctx, &src))
		require.Contains(t, src, "pg_notify('"+"bunbox_outbox"+":"+p.schema+":"+p.prefix+"'")
	}
	{ // a LISTEN of its own, direct whatever the pass
		ldb := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(outboxtest.DatabaseURL()))), pgdialect.New())
		t.Cleanup(func() { _ = ldb.Close() })
		ln := pgdriver.NewListener(ldb)
		t.Cleanup(func() { _ = ln.Close() })
		orders, billing := outboxes[1], outboxes[2]
		require.NoError(t, ln.Listen(ctx, "bunbox_outbox"+":"+orders.schema+":"+orders.prefix))
		channel := "bunbox_outbox" + ":" + orders.schema + ":orders_"
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		billing.record(t, db, "default", 1) // notifies billing_'s channel, not this one
		require.NoError(t, pgdriver.Notify(ctx, ldb, channel, "after billing"))
		got, payload, err := ln.Receive(lctx)
		require.NoError(t, err)
		require.Equal(t, []string{channel, "after billing"}, []string{got, payload}, "billing_'s insert did not notify orders_'s channel")
		orders.record(t, db, "default", 1)
		got, payload, err = ln.Receive(lctx)
		require.NoError(t, err)
		require.Equal(t, []string{channel, ""}, []string{got, payload}, "orders_'s insert notified its channel")
	}
	require.NoError(t, relay.DisableNotifyTrigger(ctx, db, model.Location{Schema: outboxes[1].schema, TablePrefix: "orders_"}))
	var triggers int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(?)`, outboxes[1].table("outbox_events")).Scan(ctx, &triggers))
	require.Zero(t, triggers)
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(?)`, outboxes[2].table("outbox_events")).Scan(ctx, &triggers))
	require.Equal(t, 1, triggers, "billing_'s trigger stays")
}

// TestTablePrefixConfigRefusesBadNames: a table prefix that cannot be used safely, or that with the
// schema makes the NOTIFY channel too long, is refused by New, NewReconciler, EnableNotifyTrigger and
// CheckSchema, naming the field and the value; OUTBOX_TABLE_PREFIX feeds Config.TablePrefix; a valid
// prefix never migrated gives ErrNoSchema naming the table.
func TestTablePrefixConfigRefusesBadNames(t *testing.T) { // not parallel: it sets OUTBOX_TABLE_PREFIX
	db := outboxtest.Unconnected(t)
	long := "s23456789012345678901234567890123456789012345678"[:48]
	for _, tc := range []struct{ schema, prefix, want string }{
		{"", "Orders_", `TablePrefix: invalid table prefix "Orders_": use lowercase ASCII letters`},
		{"", `a"b`, `TablePrefix: invalid table prefix "a\"b"`},
		{"", "9a", "TablePrefix: invalid table prefix"},
		{"", "pg_x", "names starting with pg_ are reserved"},
		{"", "a.b", "TablePrefix: invalid table prefix"},
		{"", "abcdefghijklmnopqrstuvwxy", "longer than 24 bytes"},
		{long, "orders_", "over PostgreSQL's 63"},
	} {
		_, err := relay.New(db, nil, relay.Config{Location: model.Location{Schema: tc.schema, TablePrefix: tc.prefix}, Enqueuer: &tenantEnqueuer{}})
		require.ErrorIs(t, err, relay.ErrInvalidConfig, tc.prefix)
		require.ErrorContains(t, err, tc.want, tc.prefix)
		require.ErrorContains(t, err, "TablePrefix: ", tc.prefix)
		_, err = relay.NewReconciler(db, nil, relay.ReconcilerConfig{Location: model.Location{Schema: tc.schema, TablePrefix: tc.prefix}})
		require.ErrorIs(t, err, relay.ErrInvalidConfig, tc.prefix)
		require.ErrorContains(t, err, tc.want, tc.prefix)
		cfg := relay.Config{Location: model.Location{Schema: tc.schema, TablePrefix: tc.prefix}}
		require.ErrorIs(t, relay.EnableNotifyTrigger(context.Background(), db, cfg.Location), relay.ErrInvalidConfig)
		require.ErrorIs(t, relay.CheckSchema(context.Background(), db, cfg.Location), relay.ErrInvalidConfig)
	}
	t.Setenv("OUTBOX_TABLE_PREFIX", " orders_ ")
	cfg, err := relayenv.Config()
	require.NoError(t, err)
	require.Equal(t, "orders_", cfg.Location.TablePrefix)
}

// TestTablePrefixNeverMigrated: a valid prefix whose tables do not exist gives ErrNoSchema naming the
// table and the options that create it.
func TestTablePrefixNeverMigrated(t *testing.T) {
	t.Parallel()
	db, _ := outboxtest.Schema(t)
	s := outboxtest.TenantSchema(t, db, "tenant_pn_")
	_, err := relay.New(db, asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}, relay.Config{Location: model.Location{Schema: s, TablePrefix: "never_"}, Logger: outboxtest.Logger(t)})
	require.ErrorIs(t, err, relay.ErrNoSchema)
	require.ErrorContains(t, err, `"`+s+`".never_outbox_events`)
	require.ErrorContains(t, err, "migrate.WithLocation")
}
