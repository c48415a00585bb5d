// Package model holds the outbox row: [Event], the bun model of one row of the outbox_events table,
// and [NewEvent], which builds and validates it.
//
// An event written with the bunx package in a bun transaction is delivered to asynq if and only if that
// transaction commits. The event's EventID is its idempotency key: it becomes the asynq TaskID, so a task
// enqueued twice inside the dedupe window exists once.
//
//	ev, err := model.NewEvent("order.placed", OrderPlaced{OrderID: o.ID},
//		model.WithQueue("critical"),
//		model.WithMetadata("tenant", o.Tenant),
//	)
//	if err != nil {
//		return err // the name or the payload cannot be delivered
//	}
//	return ob.Record(ctx, tx, ev)
//
// Delivery options (WithProcessAt, WithProcessIn, WithMaxRetry, WithTimeout, WithDeadline, WithGroup,
// WithTaskRetention) are kept in the row and mapped by the relay onto asynq's options of the same name.
//
// The package depends on bun and uuid only, so it can be imported anywhere events are built.
package model
