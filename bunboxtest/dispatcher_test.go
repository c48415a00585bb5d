package bunboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunboxtest"
	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/model"
)

func newEvent(t *testing.T, name string, opts ...model.Option) *model.Event {
	t.Helper()
	ev, err := model.NewEvent(name, map[string]string{"name": name}, opts...)
	require.NoError(t, err)
	return ev
}

func TestDispatcher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ConcurrentCallsAllKept", func(t *testing.T) {
		t.Parallel()
		var d bunboxtest.Dispatcher
		var wg sync.WaitGroup
		for i := range 20 {
			ev := newEvent(t, fmt.Sprintf("e.%d", i%2))
			wg.Go(func() { require.NoError(t, d.Dispatch(ctx, ev)) })
		}
		wg.Wait()
		require.Len(t, d.Events(), 20)
		require.Len(t, d.Events("e.0"), 10)
		require.Len(t, d.Events("e.0", "e.1"), 20)
		require.Empty(t, d.Events("other"))
		d.Reset()
		require.Empty(t, d.Events())
	})

	t.Run("BadCallKeepsNothing", func(t *testing.T) {
		t.Parallel()
		var d bunboxtest.Dispatcher
		ok := newEvent(t, "ok")
		require.NoError(t, d.Dispatch(ctx, ok))
		err := d.Dispatch(ctx, newEvent(t, "fine"), nil)
		require.ErrorContains(t, err, "event 1 is nil")
		err = d.Dispatch(ctx, newEvent(t, "fine"), ok)
		require.ErrorIs(t, err, bunx.ErrDuplicateEvent)
		require.ErrorContains(t, err, ok.EventID.String())
		bad := newEvent(t, "bad")
		bad.Name = ""
		err = d.Dispatch(ctx, bad)
		require.Error(t, err)
		require.False(t, errors.Is(err, bunx.ErrDuplicateEvent))
		require.Equal(t, []*model.Event{ok}, d.Events(), "only the first call's event")
	})
}
