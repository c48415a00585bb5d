package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
)

// TestStatusShowsBlockedKeys: a keyed event that is dead holds its key; status counts and names it.
func TestStatusShowsBlockedKeys(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	schema := outboxtest.NewSchema(t)
	env := map[string]string{"DATABASE_URL": outboxtest.SchemaURL(t, schema), "REDIS_ADDR": outboxtest.RedisAddr()}
	db := outboxtest.Open(t, map[string]any{"search_path": schema})
	ctx := context.Background()
	require.NoError(t, bunboxmigrate.Up(ctx, db))
	var events []*model.Event
	for range 3 {
		ev, err := model.NewEvent("account.changed", nil, model.WithOrderingKey("account-7"))
		require.NoError(t, err)
		events = append(events, ev)
	}
	_, err := db.NewInsert().Model(&events).Exec(ctx)
	require.NoError(t, err)
	_, err = db.NewUpdate().Model(events[0]).Set("published_at = NULL, dead_at = now(), last_error = 'asynq archived task'").WherePK().Exec(ctx)
	require.NoError(t, err)

	code, stdout, stderr := runCLI(t, env, "status", "-json")
	require.Equal(t, 0, code, stderr)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.EqualValues(t, 1, rep.BlockedKeys)
	require.Len(t, rep.Blocked, 1)
	require.Equal(t, "account-7", rep.Blocked[0].Key)
	require.EqualValues(t, 2, rep.Blocked[0].Waiting)

	code, stdout, stderr = runCLI(t, env, "status")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `blocked keys\s+1\n`, stdout)
	require.Contains(t, stdout, "key account-7")
	require.Contains(t, stdout, "bunbox dead retry "+events[0].EventID.String())
}
