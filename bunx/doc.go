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
// A handler builds its events from the model value, so bunx runs it only where the model value is the
// rows, and otherwise fails the statement (and so the transaction) rather than invent an event:
//
//   - An OnUpdate handler runs for a full-model update by primary key: Model(&row).WherePK(), or
//     Model(&rows).Bulk() for a slice, RETURNING allowed. Set, Column, ExcludeColumn, Value, OmitZero, a
//     Where of its own or WherePK of other columns yield [ErrModelNotRows]: record such an update's events
//     with [Outbox.Record].
//   - An OnDelete handler runs for a delete by primary key: Model(&row).WherePK() or Model(&rows).WherePK().
//     A Where of its own yields [ErrModelNotRows] (Model(&Order{}).Where("id = ?", id) would give an event
//     of zero values). A model with a soft delete column is held to the count below only.
//   - A statement that touched more rows than the model holds yields [ErrModelNotRows].
//   - A statement run on a *bun.DB without bunx's query hook, which counts the rows each statement touched,
//     yields [ErrNoQueryHook]: a clone made before New (db.WithNamedArg copies the hooks a db has at that
//     moment) or a second bun.NewDB over the same *sql.DB. Make clones after New.
//
// A registration that can never fire is refused: OnInsert, OnUpdate and OnDelete panic, as registration is
// program setup, when the hook method bun calls for the model does not reach bunx. A model that embeds
// [Hooks] and declares its own AfterInsert shadows Hooks.AfterInsert (Go's method promotion); its method must
// end in bunx.AfterInsert(ctx, q). To check, registration calls the method once per model type and
// operation on a zero value of the model, with a query whose database cannot connect: a method that only
// sometimes calls bunx passes the check and is the application's to get right.
//
// Service code that should not know the outbox takes a [Dispatcher] and a [TxRunner]; [*Outbox] implements
// the first by joining the bun.Tx that a [Transactor] put into the context. Its repositories join the same
// transaction only by writing with [TxOrDB]: a query built on a *bun.DB runs outside it and commits at once,
// whatever becomes of the transaction and its events. [WithStrictDispatch] makes Dispatch outside any
// transaction an error ([ErrNoTransaction]) instead of a write of its own.
//
// The consumer side (the inbox that makes asynq handlers exactly-once in effect, worker defaults, trace
// middleware) is package github.com/bunbox/bunbox/worker, so that a domain-model package that embeds
// [Hooks] links bun and little else: no asynq, no Redis client, no database driver.
//
// Tracing: Record and the hooks add the OpenTelemetry trace context of ctx to each event's metadata with
// the application's propagator (otel.GetTextMapPropagator), after validating the event, and only as much of
// it as fits model's metadata limits (which the relay applies to the row): baggage is dropped first, then
// tracestate, then traceparent, each drop logged at Warn ([WithLogger]); it never fails the write. The
// worker package continues the trace in the handler.
//
// bunx works on bun over pgdriver and over pgx (github.com/jackc/pgx/v5/stdlib) alike: it reads server
// errors by SQLSTATE and constraint name, never by the driver's error type.
package bunx
