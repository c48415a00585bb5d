package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/relayenv"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// tenantEnqueuer records the task ids one relay enqueued.
type tenantEnqueuer struct {
	client *asynq.Client
	mu     sync.Mutex
	ids    map[string]int
}

func (e *tenantEnqueuer) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	info, err := e.client.EnqueueContext(ctx, task, opts...)
	if err == nil {
		e.mu.Lock()
		e.ids[info.ID]++
		e.mu.Unlock()
	}
	return info, err
}

func (e *tenantEnqueuer) enqueued() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.ids))
	for k, v := range e.ids {
		out[k] = v
	}
	return out
}

// tenant is one outbox of TestRelaysOfSchemas: its schema ("" for the default names), the table as SQL,
// its events and its relay's enqueuer.
type tenant struct {
	schema, table string
	events        []*model.Event
	enq           *tenantEnqueuer
}

func (tn *tenant) count(t *testing.T, db bun.IDB, where string) int {
	t.Helper()
	var n int
	require.NoError(t, db.NewRaw("SELECT count(*) FROM "+tn.table+" WHERE "+where).Scan(context.Background(), &n))
	return n
}

func (tn *tenant) record(t *testing.T, db *bun.DB, queue string, n int) {
	t.Helper()
	ob := bunx.New(db, bunx.WithLocation(model.Location{Schema: tn.schema}))
	for i := range n {
		ev, err := model.NewEvent("tenant.event", map[string]any{"schema": tn.schema, "n": i}, model.WithQueue(queue))
		require.NoError(t, err)
		tn.events = append(tn.events, ev)
	}
	require.NoError(t, ob.Record(context.Background(), db, tn.events...))
}

// TestRelaysOfSchemas runs three outboxes in one database, each with its relay (and its reconciler): two
// in schemas (one with uppercase letters) that share one asynq queue, and one with the default names
// (through search_path) on a queue of its own. Each relay delivers exactly its own rows, once; each
// reconciler holds the lease of its own schema; the cleanup of one (a short PublishedRetention) deletes
// only its own rows. Directly, the three relays prepare their statements on the same pool's connections.
// No search_path is involved for the schemas, so this runs through the pooler too.
func TestRelaysOfSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	ins := asynq.NewInspector(redis)
	shared, own := outboxtest.RandomName("tenants_"), outboxtest.RandomName("tenants_default_")
	t.Cleanup(func() {
		_ = ins.DeleteQueue(shared, true)
		_ = ins.DeleteQueue(own, true)
		_ = ins.Close()
	})
	client := asynq.NewClient(redis)
	t.Cleanup(func() { _ = client.Close() })

	tenants := []*tenant{{schema: outboxtest.TenantSchema(t, db, "tenant_a_")}, {schema: outboxtest.TenantSchema(t, db, "Tenant_B_")}, {}}
	for _, tn := range tenants {
		tn.table = "outbox_events"
		if tn.schema != "" {
			tn.table = `"` + tn.schema + `".outbox_events`
		}
		tn.enq = &tenantEnqueuer{client: client, ids: map[string]int{}}
	}
	const n = 40
	tenants[0].record(t, db, shared, n)
	tenants[1].record(t, db, shared, n)
	tenants[2].record(t, db, own, n)

	for i, tn := range tenants {
		cfg := relay.Config{Location: model.Location{Schema: tn.schema}, Enqueuer: tn.enq, PollInterval: 50 * time.Millisecond,
			RoundBackoff: 10 * time.Millisecond, Logger: outboxtest.Logger(t),
			PreparedStatements: !outboxtest.Pooled()} // the three prepare theirs on the same connections
		if i == 0 { // the cleanup of the first deletes its rows as soon as it runs
			cfg.PublishedRetention, cfg.CleanupInterval = time.Nanosecond, 50*time.Millisecond
		}
		r, err := relay.New(db, redis, cfg)
		require.NoError(t, err, "relay of %q", tn.schema)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		t.Cleanup(func() {
			cancel()
			require.NoError(t, <-done)
			_ = r.Close()
		})
	}

	for _, tn := range tenants {
		outboxtest.WaitFor(t, 60*time.Second, fmt.Sprintf("the relay of %q enqueued its %d events", tn.schema, n), func() bool {
			return len(tn.enq.enqueued()) == n
		})
	}
	for _, tn := range tenants {
		got := tn.enq.enqueued()
		for _, ev := range tn.events {
			require.Equal(t, 1, got[ev.EventID.String()], "the relay of %q enqueued its event %s once", tn.schema, ev.EventID)
		}
		require.Len(t, got, n, "the relay of %q enqueued nothing but its own events", tn.schema)
	}
	sq, err := ins.GetQueueInfo(shared)
	require.NoError(t, err)
	require.Equal(t, 2*n, sq.Size, "the shared queue holds the tasks of both schemas")
	oq, err := ins.GetQueueInfo(own)
	require.NoError(t, err)
	require.Equal(t, n, oq.Size)

	outboxtest.WaitFor(t, 60*time.Second, "the first schema's cleanup deleted its published rows", func() bool {
		return tenants[0].count(t, db, "true") == 0
	})
	outboxtest.WaitFor(t, 60*time.Second, "the other relays marked their rows published", func() bool {
		return tenants[1].count(t, db, "published_at IS NOT NULL") == n && tenants[2].count(t, db, "published_at IS NOT NULL") == n
	})
	require.Equal(t, n, tenants[1].count(t, db, "true"), "the cleanup of one schema leaves another's rows")
	require.Equal(t, n, tenants[2].count(t, db, "true"), "and the default's")

	for _, tn := range tenants {
		leases := "bunbox_leases"
		if tn.schema != "" {
			leases = `"` + tn.schema + `".bunbox_leases`
		}
		outboxtest.WaitFor(t, 60*time.Second, fmt.Sprintf("the reconciler of %q holds the lease of its schema", tn.schema), func() bool {
			var held int
			require.NoError(t, db.NewRaw("SELECT count(*) FROM "+leases+" WHERE name = 'bunbox.reconciler' AND expires_at > now()").Scan(ctx, &held))
			return held == 1
		})
	}
}

// TestReconcilersOfSchemas loses the tasks of one schema's events from Redis: that schema's reconciler
// requeues exactly them, and the other schema's finds nothing missing and changes nothing.
func TestReconcilersOfSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.Open(t, nil)
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	ins := asynq.NewInspector(redis)
	queue := outboxtest.RandomName("tenants_reconcile_")
	t.Cleanup(func() {
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	})
	a := &tenant{schema: outboxtest.TenantSchema(t, db, "tenant_ra_")}
	b := &tenant{schema: outboxtest.TenantSchema(t, db, "tenant_rb_")}
	const n = 10
	for _, tn := range []*tenant{a, b} {
		tn.table = `"` + tn.schema + `".outbox_events`
		tn.record(t, db, queue, n)
		r, err := relay.New(db, redis, relay.Config{Location: model.Location{Schema: tn.schema}, PollInterval: 20 * time.Millisecond,
			DisableNotify: true, DisableReconciler: true, Logger: outboxtest.Logger(t)})
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		outboxtest.WaitFor(t, 60*time.Second, "every row of "+tn.schema+" enqueued", func() bool {
			return allEnqueued(ins, queue, tn.events)
		})
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, r.Close())
	}
	for _, ev := range a.events[:3] {
		require.NoError(t, ins.DeleteTask(queue, ev.EventID.String()))
	}
	for _, tc := range []struct {
		tn      *tenant
		missing int
	}{{b, 0}, {a, 3}} {
		rc, err := relay.NewReconciler(db, redis, relay.ReconcilerConfig{Location: model.Location{Schema: tc.tn.schema}, Logger: outboxtest.Logger(t)})
		require.NoError(t, err)
		res, err := rc.ReconcileOnce(ctx)
		require.NoError(t, err)
		require.NoError(t, rc.Close())
		require.Equal(t, n, res.Checked, "the reconciler of %s checks its own rows", tc.tn.schema)
		require.Equal(t, tc.missing, res.Missing, "schema %s", tc.tn.schema)
		require.Equal(t, tc.missing, res.Requeued, "schema %s", tc.tn.schema)
		require.Equal(t, tc.missing, tc.tn.count(t, db, "published_at IS NULL"), "schema %s", tc.tn.schema)
	}
}

// TestSchemaConfigRefusesBadNames: a schema name that cannot be used safely is refused by New, naming the
// field and the value, before anything reaches the database; OUTBOX_SCHEMA feeds Config.Schema.
func TestSchemaConfigRefusesBadNames(t *testing.T) { // not parallel: it sets OUTBOX_SCHEMA
	db := outboxtest.Unconnected(t)
	for _, bad := range []string{`a"b`, "a'b", "9a", "pg_x", "a.b", "a b"} {
		_, err := relay.New(db, nil, relay.Config{Location: model.Location{Schema: bad}, Enqueuer: &tenantEnqueuer{}})
		require.ErrorIs(t, err, relay.ErrInvalidConfig, bad)
		require.ErrorContains(t, err, "Schema: invalid schema name", bad)
		_, err = relay.NewReconciler(db, nil, relay.ReconcilerConfig{Location: model.Location{Schema: bad}, Inspector: nil})
		require.ErrorIs(t, err, relay.ErrInvalidConfig, bad)
		require.ErrorIs(t, relay.EnableNotifyTrigger(context.Background(), db, model.Location{Schema: bad}), relay.ErrInvalidConfig)
		require.ErrorIs(t, relay.CheckSchema(context.Background(), db, model.Location{Schema: bad}), relay.ErrInvalidConfig)
	}
	t.Setenv("OUTBOX_SCHEMA", "tenant_env")
	cfg, err := relayenv.Config()
	require.NoError(t, err)
	require.Equal(t, "tenant_env", cfg.Location.Schema)
}

// TestNotifyTrigger installs the NOTIFY trigger of a schema's outbox: its function lives in that schema
// and notifies that outbox's channel, and a relay of the schema says it listens there.
func TestNotifyTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := outboxtest.Open(t, nil)
	s := outboxtest.TenantSchema(t, db, "tenant_n_")
	require.NoError(t, relay.EnableNotifyTrigger(ctx, db, model.Location{Schema: s}))
	require.NoError(t, relay.EnableNotifyTrigger(ctx, db, model.Location{Schema: s}), "idempotent")
	var src string
	require.NoError(t, db.NewRaw(`SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		JOIN pg_trigger tg ON tg.tgfoid = p.oid JOIN pg_class c ON c.oid = tg.tgrelid
		WHERE n.nspname = ? AND c.relname = 'outbox_events' AND c.relnamespace = n.oid AND tg.tgname = 'bunbox_outbox_notify'`, s).Scan(ctx, &src))
	require.Contains(t, src, "pg_notify('"+"bunbox_outbox"+":"+s+"'")
	require.NoError(t, relay.DisableNotifyTrigger(ctx, db, model.Location{Schema: s}))
	var triggers int
	require.NoError(t, db.NewRaw(`SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(?)`, `"`+s+`".outbox_events`).Scan(ctx, &triggers))
	require.Zero(t, triggers)
}
