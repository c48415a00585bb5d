package ui

import "time"

// FreezeThrottle stops the clock of h's sign-in throttle at at, so a test trips it without racing its
// refill.
func FreezeThrottle(h *Handler, at time.Time) {
	h.throttle.mu.Lock()
	defer h.throttle.mu.Unlock()
	h.throttle.now = func() time.Time { return at }
}
