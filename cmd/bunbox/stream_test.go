package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// `bunbox stream on|off|status` turns the snapshot cursor on and off; `bunbox status` counts a waiting
// streamed row as pending and a delivered one as published, and says how far behind the cursor is.
func TestStreamCommand(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	env, db := schemaEnv(t)

	code, stdout, stderr := runCLI(t, env, "stream", "status")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^stream +on `, stdout, "on from the migrations")
	code, _, stderr = runCLI(t, env, "stream", "off")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr = runCLI(t, env, "stream", "status")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^stream +off \(turned off; cursor moved .* ago\)$`, stdout)

	code, stdout, stderr = runCLI(t, env, "stream", "on")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "stream on for outbox_events")
	on, err := relay.StreamEnabled(ctx, db, model.Location{})
	require.NoError(t, err)
	require.True(t, on)

	insertRow(t, db, "a")
	insertRow(t, db, "a")
	require.EqualValues(t, 2, outboxtest.Count(t, db, "outbox_events", "published_at = 'infinity'"), "streamed rows")
	rep := statusJSON(t, env)
	require.EqualValues(t, 2, rep.Pending)
	require.Zero(t, rep.Published)
	require.True(t, rep.Stream.On)
	require.EqualValues(t, 2, rep.Stream.Waiting)
	require.NotEmpty(t, rep.Stream.WaitsForXID)
	require.NotNil(t, rep.Stream.MovedAgo)

	outboxtest.DeliverStream(t, db)
	insertRow(t, db, "b")
	rep = statusJSON(t, env)
	require.EqualValues(t, 1, rep.Pending)
	require.EqualValues(t, 2, rep.Published)
	require.EqualValues(t, 1, rep.Stream.Waiting)
	require.Equal(t, []eventStatus{{Queue: "q1", EventName: "b", Pending: 1, OldestPendingAge: rep.Events[0].OldestPendingAge}}, rep.Events)

	code, stdout, stderr = runCLI(t, env, "status", "-asynq=false")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^published +2$`, stdout)
	require.Regexp(t, `(?m)^stream +on \(cursor moved .* ago\)$`, stdout)
	require.Regexp(t, `(?m)^  waiting +1$`, stdout)
	require.Regexp(t, `(?m)^  waits for xid +\d+ `, stdout)

	code, stdout, stderr = runCLI(t, env, "stream", "off")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "stream off for outbox_events")
	code, stdout, stderr = runCLI(t, env, "stream", "status", "-json")
	require.Equal(t, 0, code, stderr)
	var st streamStatus
	require.NoError(t, json.Unmarshal([]byte(stdout), &st))
	require.False(t, st.On)
	require.Zero(t, st.Waiting, "the waiting row is a pending row of the per-row path again")
	rep = statusJSON(t, env)
	require.EqualValues(t, 1, rep.Pending)
	require.EqualValues(t, 2, rep.Published)

	code, _, stderr = runCLI(t, env, "stream", "sideways")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `unknown stream command "sideways"`)
}

// `bunbox stream on -table-prefix P` turns the stream on for that outbox only.
func TestStreamCommandTablePrefix(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	env, db := schemaEnv(t)
	code, _, stderr := runCLI(t, env, "migrate", "up", "-table-prefix", "orders_")
	require.Equal(t, 0, code, stderr)
	for _, prefix := range []string{"orders_", ""} {
		code, _, stderr = runCLI(t, env, "stream", "off", "-table-prefix", prefix)
		require.Equal(t, 0, code, stderr)
	}
	code, stdout, stderr := runCLI(t, env, "stream", "on", "-table-prefix", "orders_")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "orders_outbox_events")
	on, err := relay.StreamEnabled(ctx, db, model.Location{TablePrefix: "orders_"})
	require.NoError(t, err)
	require.True(t, on)
	on, err = relay.StreamEnabled(ctx, db, model.Location{})
	require.NoError(t, err)
	require.False(t, on, "the other outbox of the schema is left alone")
	code, stdout, stderr = runCLI(t, env, "-table-prefix", "orders_", "stream", "status")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^stream +on `, stdout)
}

// insertRow writes an event of queue q1 with the table's defaults: a streamed row while the stream is on.
// (bun's insert of a model.Event would read published_at back, which a streamed row has as 'infinity'.)
func insertRow(t *testing.T, db bun.IDB, name string) {
	t.Helper()
	_, err := db.ExecContext(context.Background(),
		"INSERT INTO outbox_events (event_id, event_name, queue, payload) VALUES (gen_random_uuid(), ?, 'q1', '{}')", name)
	require.NoError(t, err)
}

// `bunbox cancel` tells a delivered streamed event published and a waiting one not.
func TestCancelStreamedEvents(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	env, db := schemaEnv(t)
	require.NoError(t, relay.EnableStream(ctx, db, model.Location{}))
	insertRow(t, db, "delivered")
	outboxtest.DeliverStream(t, db)
	insertRow(t, db, "waiting")
	var delivered, waiting string
	require.NoError(t, db.NewRaw("SELECT event_id::text FROM outbox_events WHERE event_name = 'delivered'").Scan(ctx, &delivered))
	require.NoError(t, db.NewRaw("SELECT event_id::text FROM outbox_events WHERE event_name = 'waiting'").Scan(ctx, &waiting))

	code, stdout, stderr := runCLI(t, env, "cancel", "-json", delivered, waiting)
	require.Equal(t, 0, code, stderr)
	var got []cancelledJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Len(t, got, 2)
	require.True(t, got[0].Published, "delivered by the stream")
	require.False(t, got[1].Published, "waiting in the stream")
	code, stdout, stderr = runCLI(t, env, "cancel", waiting)
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "published:")
}

func statusJSON(t *testing.T, env map[string]string) statusReport {
	t.Helper()
	code, stdout, stderr := runCLI(t, env, "status", "-json", "-asynq=false")
	require.Equal(t, 0, code, stderr)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	return rep
}
