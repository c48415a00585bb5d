// Package bunboxtest is what a team needs to test its own code against bunbox: events are recorded if
// and only if the transaction commits, and these helpers let a test see them without a relay or Redis.
//
//   - [Dispatcher] records the events service code dispatches, in memory, for unit tests of code that takes
//     a bunx.Dispatcher.
//   - [Events] reads the events in the outbox table as db sees them: pass the test's bun.Tx to see what
//     it wrote before it commits.
//   - [Drain] hands the pending events to asynq handlers (the worker's asynq.ServeMux), synchronously,
//     with the tasks the relay would enqueue, and marks them delivered.
//
// For an outbox in a schema, under a table prefix, or with a payload codec, use the same methods on
// [Outbox]:
//
//	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		if err := svc.PlaceOrder(ctx, tx, order); err != nil {
//			return err
//		}
//		evs, err := bunboxtest.Events(ctx, tx, "order.placed")
//		// expect one order.placed event, before the commit
//		return err
//	})
//	n, err := bunboxtest.Drain(ctx, db, mux) // mux: the asynq.ServeMux of the worker
package bunboxtest
