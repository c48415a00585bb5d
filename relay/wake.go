package relay

import "time"

// The wake-up (internal/maintenance/wakeup): an idle relay reads, every Config.WakeInterval, the last
// value of the sequence behind outbox_events.id, and runs a round as soon as it moved.

// wakeIntervalDefault is Config.WakeInterval's default.
const wakeIntervalDefault = 5 * time.Millisecond
