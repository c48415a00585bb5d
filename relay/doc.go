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
//	db := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(dsn))), pgdialect.New())
//	if err := bunboxmigrate.Up(ctx, db); err != nil {
//		return err
//	}
//	r, err := relay.New(db, asynq.RedisClientOpt{Addr: "localhost:6379"}, relay.Config{
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
// An idle relay wakes within milliseconds of a commit when the database notifies it: [EnableNotify]
// installs a statement-level trigger that sends a NOTIFY on [NotifyChannel] for every insert into the
// outbox. Without it the relay polls adaptively, [Config.MinPollInterval] right after activity, slowing
// to [Config.PollInterval] when idle. A notification is only a hint: polling always remains the safety net.
//
// Rows that fail to enqueue are retried with their own exponential backoff and marked dead after
// [Config.MaxAttempts]; [DeadEvents] lists them and [RetryDead] puts them back in line. Published rows are
// deleted after [Config.Retention]. [Relay.Stats] and [Config.Hooks] expose what happened; package
// relaymetrics turns both into Prometheus metrics.
package relay
