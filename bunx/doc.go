// Package bunx writes outbox events in the caller's bun transaction, so that an event is delivered if and
// only if the transaction that produced it commits: never for a rollback, never lost after a commit.
//
// Adoption is three steps: register model hooks, call RunInTx, start the relay goroutine.
//
//	ob := bunx.New(db)
//	bunx.OnInsert(ob, func(ctx context.Context, o *Order) ([]*model.Event, error) {
//		ev, err := model.NewEvent("order.placed", OrderPlaced{ID: o.ID})
//		return []*model.Event{ev}, err
//	})
//
//	type Order struct {
//		bun.BaseModel `bun:"table:orders"`
//		bunx.Hooks    `bun:"-"` // AfterInsert/AfterUpdate/AfterDelete record the registered events
//		ID            int64 `bun:",pk,autoincrement"`
//	}
//
//	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		_, err := tx.NewInsert().Model(order).Exec(ctx) // order.placed is written in this same tx
//		return err
//	})
//
//	r, err := relay.New(db, asynq.RedisClientOpt{Addr: addr}, relay.Config{})
//	go r.Run(ctx)
//
// The hook writes its events with the query's own connection, so inside a transaction or savepoint they
// commit and roll back with the business row. The INSERT is a literal statement run through bun, which is
// safe behind a transaction pooler (PgBouncer in transaction mode) on both drivers. On direct connections
// (or PgBouncer 1.21+ with max_prepared_statements), [WithPreparedStatements] runs it as a statement
// prepared once per connection instead, which PostgreSQL does not parse and plan in every transaction
// (BENCHMARKS.md gives what that saves). Outside a transaction the business insert
// and the events are two statements: if the process dies between them the event is lost, so write
// business rows that emit events in RunInTx.
//
// An error from Commit (a crash or a broken connection at that moment) does not prove that the transaction
// rolled back: it may have committed, and then its events are delivered. Retry such a business operation
// only if it is idempotent (WithEventID with a key derived from the operation makes its events so).
//
// Hooks see the rows bun was given: single models (*T) and slices (*[]T, *[]*T) each yield the events of
// every row that the statement actually touched (rows that ON CONFLICT DO NOTHING skipped, and updates or
// deletes that matched nothing, yield none). They never see set-based UPDATE ... WHERE, raw SQL or MERGE:
// record those events explicitly with [Outbox.Record].
//
// Service code that should not know the outbox takes a [Dispatcher]; [*Outbox] implements it by joining the
// bun.Tx that a [Transactor] put into the context.
//
// The consumer side (the inbox that makes asynq handlers exactly-once in effect, worker defaults, trace
// middleware) is package github.com/bunbox/bunbox/worker, so that a domain-model package that embeds
// [Hooks] links bun and little else: no asynq, no Redis client, no database driver.
//
// Tracing: Record and the hooks add the OpenTelemetry trace context of ctx to each event's metadata with
// the application's propagator (otel.GetTextMapPropagator); the worker package continues the trace in
// the handler.
//
// bunx works on bun over pgdriver and over pgx (github.com/jackc/pgx/v5/stdlib) alike: it reads server
// errors by SQLSTATE and constraint name, never by the driver's error type.
package bunx
