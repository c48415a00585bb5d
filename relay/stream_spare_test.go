package relay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/model"
)

// TestSpareEventsHandsBackZeroSlots: a slice kept after a round comes back from take with every slot
// zero, the payloads of the round it served let go of; a take larger than any kept slice gets a new one,
// and no more than spareKept slices are kept.
func TestSpareEventsHandsBackZeroSlots(t *testing.T) {
	var s spareEvents
	used := s.take(4)
	require.Zero(t, len(used))
	require.GreaterOrEqual(t, cap(used), 4)
	used = used[:3]
	for i := range used {
		used[i] = model.Event{ID: int64(i + 1), Name: "order.created", Payload: []byte(`{"n":1}`), Metadata: map[string]string{"k": "v"}}
	}
	s.keep(used)

	again := s.take(4)
	require.Equal(t, cap(used), cap(again), "the kept slice")
	for i, ev := range again[:cap(again)] {
		require.Zero(t, ev, "slot %d", i)
	}
	require.Greater(t, cap(s.take(cap(again)+1)), cap(again), "a larger take gets a new slice")

	for range spareKept + 3 {
		s.keep(make([]model.Event, 1, 8))
	}
	require.Len(t, s.slices, spareKept)
}
