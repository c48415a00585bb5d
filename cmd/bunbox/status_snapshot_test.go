package main

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// TestStatusReadsOneSnapshot: while rows are written into the stream (no relay runs, so they all wait),
// every `bunbox status` has pending >= the stream's waiting rows, and the per-event table adds up to
// pending: the counts come from one snapshot.
func TestStatusReadsOneSnapshot(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	env, db := schemaEnv(t)
	ctx := context.Background()
	require.NoError(t, relay.EnableStream(ctx, db, model.Location{}))

	writing, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for writing.Err() == nil {
				ev, err := model.NewEvent("order.placed", map[string]int{"n": 1})
				if err != nil {
					panic(err)
				}
				_, _ = db.NewInsert().Model(ev).Exec(writing)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	for i := range 15 {
		code, stdout, stderr := runCLI(t, env, "status", "-json", "-asynq=false")
		require.Equal(t, 0, code, stderr)
		var rep statusReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		require.GreaterOrEqual(t, rep.Pending, rep.Stream.Waiting, "run %d", i)
		var byEvent int64
		for _, e := range rep.Events {
			byEvent += e.Pending
		}
		require.Equal(t, rep.Pending, byEvent, "run %d", i)
	}
}
