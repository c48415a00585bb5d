package reconcile

// SetBetweenReads sets the function a pass runs between its read of the stream's cursors and of the clock.
func SetBetweenReads(r *Reconciler, f func()) { r.betweenReads = f }
