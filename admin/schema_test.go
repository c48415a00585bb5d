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

// TestWithSchema: under WithSchema, every operator query reads and changes the outbox of that schema
// only; without it, the default outbox (through search_path) is untouched by what was done in the schema.
func TestWithSchema(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	s := outboxtest.TenantSchema(t, db, "Tenant_Admin_")
	inS := WithSchema(ctx, s)

	record := func(schema, table string, key string) *model.Event {
		var opts []model.Option
		if key != "" {
			opts = append(opts, model.WithOrderingKey(key))
		}
		ev, err := model.NewEvent("tenant.dead", nil, opts...)
		require.NoError(t, err)
		require.NoError(t, bunx.New(db, bunx.WithSchema(schema)).Record(ctx, db, ev))
		_, err = db.NewRaw("UPDATE "+table+" SET dead_at = now(), attempts = 10 WHERE event_id = ?", ev.EventID).Exec(ctx)
		require.NoError(t, err)
		return ev
	}
	table := `"` + s + `".outbox_events`
	deadS := []*model.Event{record(s, table, ""), record(s, table, "k1"), record(s, table, "")}
	deadDefault := record("", "outbox_events", "")

	b, err := ReadBacklog(inS, db)
	require.NoError(t, err)
	require.Equal(t, int64(3), b.Dead)
	require.Equal(t, int64(1), b.BlockedKeys)
	b, err = ReadBacklog(ctx, db)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.Dead, "the default outbox")

	listed, err := ListDead(inS, db, 0)
	require.NoError(t, err)
	require.Len(t, listed, 3)
	for i, ev := range listed {
		require.Equal(t, deadS[i].EventID, ev.EventID)
	}
	keys, err := BlockedKeys(inS, db, 0)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	by, err := ReadBacklogByEvent(inS, db)
	require.NoError(t, err)
	require.Equal(t, []EventBacklog{{Queue: "default", EventName: "tenant.dead", Dead: 3}}, by)

	n, err := RetryDead(inS, db, deadS[0].EventID, deadDefault.EventID)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the schema's event")
	n, err = CountDead(inS, db, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	n, err = RetryDeadWhere(inS, db, DeadFilter{EventIDs: []uuid.UUID{deadS[1].EventID}})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = PurgeDead(inS, db, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = CountDead(ctx, db, DeadFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the default outbox's dead event is untouched")

	_, err = ReadBacklog(WithSchema(ctx, `x"; DROP TABLE outbox_events; --`), db)
	require.ErrorContains(t, err, `admin: WithSchema: invalid schema name "x\"; DROP TABLE outbox_events; --"`)
	_, err = PurgeDead(WithSchema(ctx, "9x"), db, DeadFilter{All: true})
	require.ErrorContains(t, err, "invalid schema name")
}
