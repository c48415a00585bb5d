package admin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestWithTablePrefix: under WithSchema and WithTablePrefix, every operator query reads and changes the
// outbox of that prefix only; the other prefix's outbox and the schema's unprefixed one are untouched.
func TestWithTablePrefix(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	s := outboxtest.TenantSchema(t, db, "tenant_admin_p_")
	outboxtest.TenantTables(t, db, s, "orders_")
	outboxtest.TenantTables(t, db, s, "billing_")
	in := func(prefix string) context.Context { return WithTablePrefix(WithSchema(ctx, s), prefix) }

	record := func(prefix, key string) *model.Event {
		var opts []model.Option
		if key != "" {
			opts = append(opts, model.WithOrderingKey(key))
		}
		ev, err := model.NewEvent("prefixed.dead", nil, opts...)
		require.NoError(t, err)
		require.NoError(t, bunx.New(db, bunx.WithSchema(s), bunx.WithTablePrefix(prefix)).Record(ctx, db, ev))
		_, err = db.NewRaw(`UPDATE "`+s+`".`+prefix+"outbox_events SET dead_at = now(), attempts = 10 WHERE event_id = ?", ev.EventID).Exec(ctx)
		require.NoError(t, err)
		return ev
	}
	orders := []*model.Event{record("orders_", ""), record("orders_", "k1"), record("orders_", "")}
	billing := record("billing_", "")
	record("", "")

	for prefix, dead := range map[string]int64{"orders_": 3, "billing_": 1, "": 1} {
		b, err := ReadBacklog(in(prefix), db)
		require.NoError(t, err)
		require.Equal(t, dead, b.Dead, "the outbox of %q", prefix)
	}
	listed, err := ListDead(in("orders_"), db, 0)
	require.NoError(t, err)
	require.Len(t, listed, 3)
	keys, err := BlockedKeys(in("orders_"), db, 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)

	n, err := RetryDead(in("orders_"), db, orders[0].EventID, billing.EventID)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the prefix's event")
	n, err = PurgeDead(in("orders_"), db, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	for prefix, dead := range map[string]int64{"orders_": 0, "billing_": 1, "": 1} {
		n, err := CountDead(in(prefix), db, DeadFilter{All: true})
		require.NoError(t, err)
		require.Equal(t, dead, n, "the outbox of %q", prefix)
	}

	_, err = ReadBacklog(WithTablePrefix(ctx, "Orders_"), db)
	require.ErrorContains(t, err, `admin: WithTablePrefix: invalid table prefix "Orders_"`)
	_, err = PurgeDead(WithTablePrefix(ctx, `x"; DROP TABLE outbox_events; --`), db, DeadFilter{All: true})
	require.ErrorContains(t, err, `admin: WithTablePrefix: invalid table prefix`)
}
