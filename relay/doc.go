// Package relay forwards committed outbox rows to asynq: a row written in a bun transaction reaches Redis
// if and only if that transaction committed, and every committed row is enqueued at least once, with the
// event id as the asynq TaskID so that a second enqueue inside the dedupe window ([Config.TaskRetention])
// is absorbed by asynq and the task exists once.
//
// A [Relay] claims a batch of pending rows with FOR UPDATE SKIP LOCKED inside a transaction, enqueues them
// concurrently, marks the delivered ones published and the failed ones for a later retry, and commits. Any
// number of relays can run against one database with no coordination: a locked row is skipped by the
// others, and a crash releases the locks, so the rows are claimed again (and deduplicated by TaskID).
//
// An event's delivery options (model.WithProcessAt, WithMaxRetry, WithTimeout, WithDeadline, WithGroup,
// WithTaskRetention) become the task's asynq options of the same name; a scheduled event is enqueued at once and
// waits in asynq's scheduled set.
//
//	db, err := connect.Postgres(ctx, dsn, connect.Options{}) // dsn: postgres://...?sslmode=verify-full
//	if err != nil {
//		return err
//	}
//	if err := bunboxmigrate.Up(ctx, db); err != nil {
//		return err
//	}
//	redisOpt, err := connect.Redis(redisURL) // redis://:password@host:6379/0, rediss://, redis-sentinel://...
//	if err != nil {
//		return err
//	}
//	r, err := relay.New(db, redisOpt, relay.Config{
//		Logger: slog.Default(),
//	})
//	if err != nil {
//		return err // Redis unreachable, or the outbox table missing
//	}
//	go func() {
//		if err := r.Run(ctx); err != nil { // blocks until ctx is done; nil on a clean stop
//			slog.Error("relay", slog.Any("err", err))
//		}
//	}()
//
// # Wake-up
//
// A full batch is followed by the next round at once. After an empty round the relay polls again after
// [Config.MinPollInterval] (5ms) for a second, then doubles its wait up to [Config.PollInterval] (500ms),
// so under traffic the commit-to-enqueued latency is a few milliseconds, and after a long quiet spell it is
// at most PollInterval. [EnableNotifyTrigger] adds a statement-level trigger that sends a NOTIFY on
// the channel bunbox_outbox for every insert into the outbox: a relay then wakes within a millisecond or two of
// the commit however long it was idle. The relay listens with pgdriver's Listener or, when the *bun.DB
// runs on pgx (github.com/jackc/pgx/v5/stdlib), on a pgx connection of its own dialed with the
// configuration of one of the pool's connections; under another driver it only polls. It listens only on a
// connection it can tell is direct, never through a pooler in transaction mode (whose notifications reach
// other clients); behind one, give [Config.ListenURL] a direct connection. A notification is
// only a hint (one sent while the listener reconnects is lost); polling remains the safety net. The trigger is opt-in because a NOTIFY takes a
// database-wide lock at commit that serializes committing writers: BenchmarkNotifyCommitCost measured
// 8 concurrent writers at 0.59 to 0.71 of their plain commit rate, and 0.09 on a heavily loaded machine.
//
// # Throughput
//
// Rounds run in up to [Config.Workers] workers that share the [Config.Concurrency] bound on enqueues, so
// that one batch's claim and commit overlap another's enqueues. Within a round, delivered rows are marked
// published in chunks while the rest of the batch is still enqueued. The marks are committed with
// synchronous_commit off: a mark lost in a database crash only means a second enqueue, which the TaskID
// absorbs.
//
// asynq sends every enqueue as its own script call. The Redis client that New makes pipelines the script
// calls of concurrent enqueues: one write and one round trip carry many of them, each with its own reply
// and error, which cuts the CPU of the relay and of Redis per event. A [Config.Enqueuer] of your own is
// used as it is. BenchmarkDrainBacklog compares the relay's drain rate with bare concurrent enqueues of
// the same tasks, with and without the pipelining.
//
// Size the database pool: the relay holds a connection per round in flight (Config.Workers) and one for
// the listener, next to the application's own. database/sql keeps only 2 idle connections by default, so a
// busy process reconnects all the time; set db.SetMaxIdleConns to about MaxOpenConns. Measured at 1,000
// events/s: p99 commit-to-enqueue 32 ms with the default, 4-8 ms with 20 idle connections.
//
// # Per-key ordering
//
// Events built with model.WithOrderingKey are handled one at a time per key, in outbox id order, by plain
// asynq handlers. The relay claims only the head of each key (its first row not yet completed) while it
// is pending, and a tracker in every relay reads the states of the keyed tasks in flight from Redis every
// [Config.KeyCheckInterval]: a completed task sets the row's completed_at, which makes the next row the
// head and wakes the relay; an archived task marks the row dead, which blocks the key (admin.Outbox.BlockedKeys)
// until admin.Outbox.RetryDead; a task Redis lost is enqueued again. Unkeyed rows are claimed through their own index
// and never wait for keyed ones. BenchmarkOrderingHandoff and BenchmarkOrderingUnkeyedCost measure what
// it costs; docs/delivery.md gives the limits and docs/performance.md the figures.
//
// Rows that fail to enqueue are retried with their own exponential backoff and marked dead after
// [Config.MaxAttempts]. Published rows are deleted after [Config.PublishedRetention]. [Relay.Stats] and
// [Config.Observer] expose what happened; package relaymetrics turns both into Prometheus metrics. The
// operator's queries are the methods of admin.Outbox (github.com/bunbox/bunbox/admin; admin.New(db, loc)
// with the relay's Config.Location): ListDead lists the dead events and RetryDead puts them back in line;
// admin.DeadFilter selects them by id, name or age for CountDead, RetryDeadWhere and PurgeDead;
// ReadBacklog and ReadBacklogByEvent read the backlog, BlockedKeys the keys a dead event holds.
//
// # Tracing
//
// Every enqueue runs in an OpenTelemetry publish span from [Config.TracerProvider] (default: the global
// one): kind producer, named "send <queue>", with the messaging conventions' attributes (messaging.system
// "asynq", messaging.operation.type "send", messaging.destination.name the queue, messaging.message.id the
// event id). It links to the span that recorded the event, read from the event's metadata with the
// application's propagator (otel.GetTextMapPropagator). The task carries the producer's trace context
// unchanged, so the handler's span (worker.TraceMiddleware, the worker Inbox) is the producer's span's child.
package relay
