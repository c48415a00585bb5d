// Package admin holds the operator's queries on the outbox table: what is pending, what is dead, which
// ordering keys a dead event blocks, and putting dead events back in line or purging them. They are
// methods of [Outbox], the handle on the outbox at one model.Location: plain SQL on a bun.IDB, so they
// run from any process (the bunbox CLI and page use them), with or without a relay, and in a transaction
// when New is given a bun.Tx.
//
//	ob, err := admin.New(db, model.Location{})      // the Location the relay and bunx were given
//	b, err := ob.ReadBacklog(ctx)                   // pending, dead, lag, scheduled, blocked keys
//	dead, err := ob.ListDead(ctx, 50)               // the oldest dead events, with their last error
//	n, err := ob.RetryDead(ctx, dead[0].EventID)    // back in line: the relay picks it up next round
//	n, err = ob.PurgeDead(ctx, admin.DeadFilter{Names: []string{"cart.remind"}})
//
// A retried keyed event (model.WithOrderingKey) unblocks its key once its fresh task completed.
package admin
