package admin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestLocationTablePrefix: on an Outbox of a Location with a Schema and a TablePrefix, every operator
// query reads and changes the outbox of that prefix only; the other prefix's outbox and the schema's
// unprefixed one are untouched.
func TestLocationTablePrefix(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	s := outboxtest.TenantSchema(t, db, "tenant_admin_p_")
	outboxtest.TenantTables(t, db, s, "orders_")
	outboxtest.TenantTables(t, db, s, "billing_")
	in := func(prefix string) *Outbox { return outboxOf(t, db, model.Location{Schema: s, TablePrefix: prefix}) }

	record := func(prefix, key string) *model.Event {
		var opts []model.Option
		if key != "" {
			opts = append(opts, model.WithOrderingKey(key))
		}
		ev, err := model.NewEvent("prefixed.dead", nil, opts...)
		require.NoError(t, err)
		require.NoError(t, bunx.New(db, bunx.WithLocation(model.Location{Schema: s, TablePrefix: prefix})).Record(ctx, db, ev))
		_, err = db.NewRaw(`UPDATE "`+s+`".`+prefix+"outbox_events SET published_at = NULL, dead_at = now(), attempts = 10 WHERE event_id = ?", ev.EventID).Exec(ctx)
		require.NoError(t, err)
		return ev
	}
	orders := []*model.Event{record("orders_", ""), record("orders_", "k1"), record("orders_", "")}
	billing := record("billing_", "")
	record("", "")

	for prefix, dead := range map[string]int64{"orders_": 3, "billing_": 1, "": 1} {
		b, err := in(prefix).ReadBacklog(ctx)
		require.NoError(t, err)
		require.Equal(t, dead, b.Dead, "the outbox of %q", prefix)
	}
	listed, err := in("orders_").ListDead(ctx, 0)
	require.NoError(t, err)
	require.Len(t, listed, 3)
	keys, err := in("orders_").BlockedKeys(ctx, 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)

	n, err := in("orders_").RetryDead(ctx, orders[0].EventID, billing.EventID)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the prefix's event")
	n, err = in("orders_").PurgeDead(ctx, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	for prefix, dead := range map[string]int64{"orders_": 0, "billing_": 1, "": 1} {
		n, err := in(prefix).CountDead(ctx, DeadFilter{All: true})
		require.NoError(t, err)
		require.Equal(t, dead, n, "the outbox of %q", prefix)
	}

	_, err = New(db, model.Location{TablePrefix: "Orders_"})
	require.ErrorContains(t, err, `admin: New: model: Location.TablePrefix: invalid table prefix "Orders_"`)
	_, err = New(db, model.Location{TablePrefix: `x"; DROP TABLE outbox_events; --`})
	require.ErrorContains(t, err, `admin: New: model: Location.TablePrefix: invalid table prefix`)
}
