package relay

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/stretchr/testify/require"
)

// Three relays stream while their positions are rotated every few moves (store.Stream.Rotate, each
// relay's check once per streamCheckInterval): every row is enqueued once, its task in Redis once, and
// the positions' table keeps few rows. A rotation that lost a cursor's position, or let a round move a
// cursor from a position the rotation had replaced, would deliver rows again or skip them.
func TestStreamPositionsRotateWhileRelaysStream(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	b := setupStream(t)
	events := b.record(t, b.db, 200)
	var relays []*Relay
	for range 3 {
		r := b.newRelay(t, Config{BatchSize: 20, Workers: 2, DisableReconciler: true})
		r.stream.rotateAfter = 10
		run(t, r)
		relays = append(relays, r)
	}
	// Besides the relays' own checks, rotations back to back from a goroutine of the test.
	ctx, stop := context.WithCancel(context.Background())
	var rotations atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			before := outboxtest.Count(t, b.db, "bunbox_stream_positions", "part = 1")
			relays[0].rounds.stream.rotate(ctx)
			if (outboxtest.Count(t, b.db, "bunbox_stream_positions", "part = 1") > 0) != (before > 0) {
				rotations.Add(1)
			}
		}
	}()
	for range 30 {
		events = append(events, b.record(t, b.db, 40)...)
		b.waitQueued(t, len(events))
	}
	stop()
	<-done
	outboxtest.WaitFor(t, streamWait, "the cursors past every row", func() bool {
		return countStream(t, b.db).Delivered == int64(len(events))
	})
	requireDeliveredOnce(t, b.inspector, b.queue, events)
	b.requireEnqueuedOnce(t, events)
	require.Zero(t, countStream(t, b.db).Classic, "nothing handed over")
	t.Logf("rotations seen from the test's goroutine: %d", rotations.Load())
	require.Greater(t, rotations.Load(), int64(3), "the positions were rotated")
	outboxtest.WaitFor(t, streamWait, "a rotation after the last rows", func() bool {
		return outboxtest.Count(t, b.db, "bunbox_stream_positions", "") <= 10+int64(streamSlices)+1+10
	})
}

// A rotation that keeps meeting a lock held too long (here a transaction holding a lane's cursor row) gives
// up each time without holding the stream back, and the relay says so at Warn after enough tries in a row:
// the positions are kept, and grow, until one gets through.
func TestStreamPositionsRotationBlockedIsSaid(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()
	b := setupStream(t)
	events := b.record(t, b.db, 40)
	r := b.newRelay(t, Config{DisableReconciler: true})
	r.stream.rotateAfter, r.stream.rotateWarnAfter = 1, 2
	run(t, r)
	b.waitQueued(t, len(events))
	held, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = held.Rollback() }()
	_, err = held.ExecContext(ctx, "SELECT 1 FROM bunbox_stream WHERE queue IS NOT NULL LIMIT 1 FOR UPDATE")
	require.NoError(t, err)
	for range 2 { // (the relay's own checks try too, once a second)
		r.rounds.stream.rotate(ctx)
	}
	require.NotEmpty(t, b.logs.matching("could not be rotated"))
	require.NoError(t, held.Rollback())
	cursors := outboxtest.Count(t, b.db, "bunbox_stream", "")
	outboxtest.WaitFor(t, streamWait, "a rotation once the lock is gone", func() bool {
		r.rounds.stream.rotate(ctx)
		return outboxtest.Count(t, b.db, "bunbox_stream_positions", "") <= cursors+1
	})
}
