// Package worker is the consumer side of bunbox: it makes asynq handlers exactly-once in effect for events
// that the relay delivers at least once. An [Inbox] records each event id in the handler's own bun
// transaction, so a repeated delivery of one event is acknowledged without running the work again, and the
// work and its record commit or roll back together.
//
//	inbox := worker.NewInbox(db)
//	mux := asynq.NewServeMux()
//	mux.Handle("order.placed", worker.HandleJSON(inbox, "send-confirmation",
//		func(ctx context.Context, tx bun.Tx, p *OrderPlaced) error {
//			_, err := tx.NewInsert().Model(&Confirmation{OrderID: p.OrderID}).Exec(ctx)
//			return err
//		}))
//	srv := asynq.NewServer(redisOpt, worker.ServerConfig(asynq.Config{}))
//	err := srv.Run(worker.ArchiveUnrouted(mux, logger))
//
// [ServerConfig] gives an asynq server bunbox's worker defaults (TaskCheckInterval 10ms rather than 1s,
// DelayedTaskCheckInterval 100ms rather than 5s). [TraceMiddleware], for plain asynq handlers, and the
// Inbox's handlers read the producer's trace context from the task headers and run the handler in a
// consumer span ("process <queue>", messaging conventions) that is the producer's span's child.
// [InboxCleaner] deletes the records older than a window that must outlast asynq's longest redelivery
// span ([InboxCleanerConfig.MinWindow]); [ArchiveUnrouted] archives a task no handler is registered for instead of
// retrying it for weeks.
//
// The package was split out of bunx so that the producer side stays light; the names are unchanged.
package worker
