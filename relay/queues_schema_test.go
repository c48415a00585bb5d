package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// The fair-queue lane of a relay of a schema (Config.Location) looks for and claims rows in that schema's
// outbox only: a critical row pending in the outbox that search_path finds belongs to another outbox and
// stays unclaimed, while the lane serves the schema's own critical rows behind its bulk backlog.
func TestQueuesLaneStaysInItsSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s := outboxtest.TenantSchema(t, b.db, "tenant_q_")
	// Config.Queues splits the per-row path's claim; the stream does not split by queue yet.
	require.NoError(t, DisableStream(ctx, b.db, model.Location{Schema: s}))
	table := `"` + s + `".outbox_events`
	bulk, crit := b.queue, b.queue+"_c"

	other := insertEvents(t, b.db, crit, 1) // the outbox of search_path: not this relay's
	insertIn := func(queue string, n int) {
		events := make([]*model.Event, n)
		for i := range events {
			ev, err := model.NewEvent("test.event", map[string]int{"n": i}, model.WithQueue(queue))
			require.NoError(t, err)
			events[i] = ev
		}
		for chunk := range chunks(events, 1000) {
			_, err := b.db.NewInsert().Model(&chunk).ModelTableExpr(table).Exec(ctx)
			require.NoError(t, err)
		}
	}
	insertIn(bulk, 3000)
	r := b.newRelay(t, Config{Location: model.Location{Schema: s}, Queues: map[string]int{crit: 6, bulk: 1}, BatchSize: 100,
		Workers: 1, DisableReconciler: true})
	run(t, r)
	insertIn(crit, 5)
	outboxtest.WaitFor(t, 2*time.Minute, "the schema's rows published", func() bool {
		var n int
		require.NoError(t, b.db.NewRaw("SELECT count(*) FROM "+table+" WHERE published_at IS NULL").Scan(ctx, &n))
		return n == 0
	})
	b.enq.mu.Lock()
	defer b.enq.mu.Unlock()
	require.Zero(t, b.enq.calls[other[0].EventID.String()], "the lane enqueued a row of another outbox")
	require.Equal(t, 3005, b.enq.total)
	require.Zero(t, published(t, b.db), "the outbox of search_path untouched")
}
