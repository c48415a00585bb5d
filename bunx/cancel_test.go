package bunx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// cancelState is what Cancel writes into a row.
type cancelState struct {
	Cancelled bool   `bun:"cancelled"`
	Settled   bool   `bun:"settled"`
	Result    string `bun:"result"`
	Completed bool   `bun:"completed"`
}

func readCancelState(t *testing.T, db bun.IDB, id uuid.UUID) cancelState {
	t.Helper()
	var s cancelState
	require.NoError(t, db.NewRaw(`SELECT cancelled_at IS NOT NULL AS cancelled, cancel_settled_at IS NOT NULL AS settled,
  coalesce(cancel_result, '') AS result, completed_at IS NOT NULL AS completed FROM outbox_events WHERE event_id = ?`, id).
		Scan(context.Background(), &s))
	return s
}

// neverPublished is the state Cancel leaves a row in that no relay has enqueued. On the per-row path
// (BUNBOX_TEST_STREAM=off) Cancel settles it at once, and releases its ordering key (completed). A row
// waiting in the stream is only marked cancelled: a stream round may have read it already, so the round
// that passes it settles the cancel (never enqueuing it), as the relay's stream tests show.
func neverPublished(completed bool) cancelState {
	if !outboxtest.StreamOff() {
		return cancelState{Cancelled: true}
	}
	return cancelState{Cancelled: true, Settled: true, Result: "never published", Completed: completed}
}

func recordEvents(t *testing.T, b *testBundle, opts ...model.Option) []*model.Event {
	t.Helper()
	var evs []*model.Event
	for range 3 {
		ev, err := model.NewEvent("cart.remind", map[string]int{"n": 1}, opts...)
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	require.NoError(t, b.ob.Record(context.Background(), b.db, evs...))
	return evs
}

func TestCancel(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	ctx := context.Background()

	t.Run("CommitCancelsNeverPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := recordEvents(t, b)
		require.NoError(t, b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			return b.ob.Cancel(ctx, tx, evs[0].EventID, evs[1].EventID)
		}))
		for _, ev := range evs[:2] {
			require.Equal(t, neverPublished(false), readCancelState(t, b.db, ev.EventID))
		}
		require.Equal(t, cancelState{}, readCancelState(t, b.db, evs[2].EventID))
	})

	t.Run("RollbackChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := recordEvents(t, b)
		boom := errors.New("boom")
		err := b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			require.NoError(t, b.ob.Cancel(ctx, tx, evs[0].EventID))
			require.True(t, readCancelState(t, tx, evs[0].EventID).Cancelled, "cancelled inside the transaction")
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, cancelState{}, readCancelState(t, b.db, evs[0].EventID))
	})

	t.Run("UnknownIDNamedAndNothingCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := recordEvents(t, b)
		unknown := uuid.New()
		err := b.ob.Cancel(ctx, b.db, evs[0].EventID, unknown)
		require.ErrorIs(t, err, bunx.ErrUnknownEvent)
		require.Contains(t, err.Error(), unknown.String())
		require.NotContains(t, err.Error(), evs[0].EventID.String(), "only the unknown id is named")
		require.Equal(t, cancelState{}, readCancelState(t, b.db, evs[0].EventID), "all or nothing")
	})

	t.Run("TwiceIsANoOp", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := recordEvents(t, b)
		require.NoError(t, b.ob.Cancel(ctx, b.db, evs[0].EventID, evs[0].EventID))
		var first, second string
		require.NoError(t, b.db.NewRaw("SELECT cancelled_at::text FROM outbox_events WHERE event_id = ?", evs[0].EventID).Scan(ctx, &first))
		require.NoError(t, b.ob.Cancel(ctx, b.db, evs[0].EventID))
		require.NoError(t, b.db.NewRaw("SELECT cancelled_at::text FROM outbox_events WHERE event_id = ?", evs[0].EventID).Scan(ctx, &second))
		require.Equal(t, first, second)
		require.NoError(t, b.ob.Cancel(ctx, b.db), "no ids: nothing to do")
	})

	t.Run("KeyedNeverPublishedReleasesItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := recordEvents(t, b, model.WithOrderingKey("account-1"))
		require.NoError(t, b.ob.Cancel(ctx, b.db, evs[0].EventID))
		require.Equal(t, neverPublished(true), readCancelState(t, b.db, evs[0].EventID))
	})

	t.Run("PublishedIsLeftToTheRelay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := recordEvents(t, b)
		_, err := b.db.NewRaw("UPDATE outbox_events SET published_at = now() WHERE event_id = ?", evs[0].EventID).Exec(ctx)
		require.NoError(t, err)
		require.NoError(t, b.ob.Cancel(ctx, b.db, evs[0].EventID))
		require.Equal(t, cancelState{Cancelled: true}, readCancelState(t, b.db, evs[0].EventID))
	})
}
