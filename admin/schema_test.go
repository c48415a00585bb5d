package admin

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// TestLocationSchema: on an Outbox of a Location with a Schema, every operator query reads and changes the
// outbox of that schema only; the default outbox (through search_path) is untouched by what was done in
// the schema.
func TestLocationSchema(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	s := outboxtest.TenantSchema(t, db, "Tenant_Admin_")
	inS := outboxOf(t, db, model.Location{Schema: s})
	def := outboxOf(t, db)

	record := func(schema, table string, key string) *model.Event {
		var opts []model.Option
		if key != "" {
			opts = append(opts, model.WithOrderingKey(key))
		}
		ev, err := model.NewEvent("tenant.dead", nil, opts...)
		require.NoError(t, err)
		require.NoError(t, bunx.New(db, bunx.WithLocation(model.Location{Schema: schema})).Record(ctx, db, ev))
		_, err = db.NewRaw("UPDATE "+table+" SET published_at = NULL, dead_at = now(), attempts = 10 WHERE event_id = ?", ev.EventID).Exec(ctx)
		require.NoError(t, err)
		return ev
	}
	table := `"` + s + `".outbox_events`
	deadS := []*model.Event{record(s, table, ""), record(s, table, "k1"), record(s, table, "")}
	deadDefault := record("", "outbox_events", "")

	b, err := inS.ReadBacklog(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), b.Dead)
	require.Equal(t, int64(1), b.BlockedKeys)
	b, err = def.ReadBacklog(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.Dead, "the default outbox")

	listed, err := inS.ListDead(ctx, 0)
	require.NoError(t, err)
	require.Len(t, listed, 3)
	for i, ev := range listed {
		require.Equal(t, deadS[i].EventID, ev.EventID)
	}
	keys, err := inS.BlockedKeys(ctx, 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	by, err := inS.ReadBacklogByEvent(ctx)
	require.NoError(t, err)
	require.Equal(t, []EventBacklog{{Queue: "default", EventName: "tenant.dead", Dead: 3}}, by)

	n, err := inS.RetryDead(ctx, deadS[0].EventID, deadDefault.EventID)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the schema's event")
	n, err = inS.CountDead(ctx, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	n, err = inS.RetryDeadWhere(ctx, DeadFilter{EventIDs: []uuid.UUID{deadS[1].EventID}})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = inS.PurgeDead(ctx, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = def.CountDead(ctx, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the default outbox's dead event is untouched")

	_, err = New(db, model.Location{Schema: `x"; DROP TABLE outbox_events; --`})
	require.ErrorContains(t, err, `admin: New: model: Location.Schema: invalid schema name "x\"; DROP TABLE outbox_events; --"`)
	_, err = New(db, model.Location{Schema: "9x"})
	require.ErrorContains(t, err, "invalid schema name")
	_, err = New(nil, model.Location{})
	require.ErrorContains(t, err, "admin: New: db must not be nil")
}
