package relay

import (
	"slices"
	"sync"

	"github.com/bunbox/bunbox/model"
)

// spareKept bounds the event slices the stream keeps for its next reads: a round holds up to
// streamRoundBatches of them, and the next round takes them back.
const spareKept = streamRoundBatches + 1

// spareEvents keeps the event slices of the stream's finished rounds, cleared, for its next reads. A
// read's slice is BatchSize events (about 130 kB at the default 500), and a new one per read cost the
// relay the first touch of fresh memory and the runtime's scavenger giving it back in between: about 7 %
// of the stream relay's CPU in a drain profile (bunbench -parts drain, BUNBENCH_DRAIN_PROFILE). The
// slices hold no payload while kept; no event of them is ever handed out of the relay by pointer.
type spareEvents struct {
	mu     sync.Mutex
	slices [][]model.Event
}

// take returns an empty slice with room for n events, each slot zero.
func (s *spareEvents) take(n int) []model.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.slices) - 1; i >= 0; i-- {
		if ev := s.slices[i]; cap(ev) >= n {
			s.slices = slices.Delete(s.slices, i, i+1)
			return ev
		}
	}
	return make([]model.Event, 0, n)
}

// keep clears events and keeps them for a later take, unless enough are kept already. The caller uses
// events no more.
func (s *spareEvents) keep(events []model.Event) {
	if cap(events) == 0 {
		return
	}
	events = events[:cap(events)]
	clear(events)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.slices) < spareKept {
		s.slices = append(s.slices, events[:0])
	}
}

// recycle gives the event slices of the pass's batches back to spare, once the round is done with them.
func (p *streamPass) recycle(spare *spareEvents) {
	for _, b := range p.batches {
		spare.keep(b.read.events)
		b.read.events = nil
	}
}
