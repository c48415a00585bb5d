package relay

import "github.com/bunbox/bunbox/internal/store"

// The outcomes of a cancel, kept in the row's cancel_result column (see store.CancelNeverPublished); the
// cancel service is internal/maintenance/cancel.
const (
	cancelNeverPublished = store.CancelNeverPublished
	cancelRemoved        = store.CancelRemoved
	cancelGone           = store.CancelGone
	cancelRan            = store.CancelRan
	cancelRunning        = store.CancelRunning
)
