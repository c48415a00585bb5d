package relay

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// A relay with Config.Queues on an outbox with the stream on says once, at Warn, that the queues do not
// split the streamed rows; it delivers them all the same. Without Queues it says nothing of the kind.
func TestStreamWarnsThatQueuesApplyOnlyPerRow(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	const warning = "Config.Queues applies only to the per-row path"

	plain := b.newRelay(t, Config{DisableReconciler: true})
	stop := run(t, plain)
	events := b.record(t, b.db, 20)
	b.waitQueued(t, len(events))
	stop()
	require.Empty(t, b.logs.matching(warning), "a relay without Queues")

	r := b.newRelay(t, Config{Queues: map[string]int{b.queue: 3, "other": 1}, DisableReconciler: true})
	run(t, r)
	more := b.record(t, b.db, 30)
	b.waitQueued(t, len(events)+len(more))
	outboxtest.WaitFor(t, streamWait, "the cursor past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events)+len(more))
	})
	first := catalogReadAt(r)
	outboxtest.WaitFor(t, streamWait, "the relay reading the catalog again", func() bool {
		return catalogReadAt(r).After(first)
	})
	logged := b.logs.matching(warning)
	require.Len(t, logged, 1, "once, not per read of the catalog")
	require.Equal(t, slog.LevelWarn, logged[0].Level)
	requireDeliveredOnce(t, b.inspector, b.queue, append(events, more...))
}

// catalogReadAt is when r last read from the catalog whether the stream is on.
func catalogReadAt(r *Relay) time.Time {
	r.stream.mu.Lock()
	defer r.stream.mu.Unlock()
	return r.stream.checkedAt
}
