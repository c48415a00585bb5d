// Package admin holds the operator's queries on the outbox table: what is pending, what is dead, which
// ordering keys a dead event blocks, and putting dead events back in line or purging them. They are plain
// SQL on a bun.IDB, so they run from any process (the bunbox CLI uses them), with or without a relay.
//
//	b, err := admin.ReadBacklog(ctx, db)              // pending, dead, lag, scheduled, blocked keys
//	dead, err := admin.ListDead(ctx, db, 50)          // the oldest dead events, with their last error
//	n, err := admin.RetryDead(ctx, db, dead[0].EventID) // back in line: the relay picks it up next round
//	n, err = admin.PurgeDead(ctx, db, admin.DeadFilter{Names: []string{"cart.remind"}})
//
// A retried keyed event (model.WithOrderingKey) unblocks its key once its fresh task completed.
package admin
