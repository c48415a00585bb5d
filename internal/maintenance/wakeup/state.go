package wakeup

import (
	"sync/atomic"
	"time"

	"github.com/bunbox/bunbox/model"
)

// State is what the watcher shares with the relay's rounds: the largest id the relay has claimed, when a
// claim last returned rows, and how many times the watcher woke and read (for the tests). The zero value
// is ready to use.
type State struct {
	Claimed atomic.Int64
	RowsAt  atomic.Int64 // when a claim last returned rows, in Unix nanoseconds
	Reads   atomic.Int64
	Wakes   atomic.Int64 // how many times the watcher's timer fired, read or not
}

// Note records the ids of a claim.
func (s *State) Note(events []model.Event) {
	if len(events) > 0 {
		s.RowsAt.Store(time.Now().UnixNano())
	}
	for i := range events {
		for {
			old := s.Claimed.Load()
			if events[i].ID <= old || s.Claimed.CompareAndSwap(old, events[i].ID) {
				break
			}
		}
	}
}

// HotFor is how much longer the relay polls at minPoll after its last claim that returned rows (within
// window, the relay's hot window), when that is as often as the wake-up would look (minPoll at most
// interval); 0 when it does not. A read then buys nothing: the watcher sleeps until the window ends
// instead of waking every interval to find the relay busy, which under steady traffic cost the relay's
// process a timer wake-up 200 times a second for nothing. A claim during the sleep moves the end of the
// window; the watcher looks again when it wakes.
func (s *State) HotFor(minPoll, interval, window time.Duration, now time.Time) time.Duration {
	if minPoll > interval {
		return 0
	}
	return max(0, window-now.Sub(time.Unix(0, s.RowsAt.Load())))
}
