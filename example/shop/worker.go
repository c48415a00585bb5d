package shop

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/worker"
)

// Confirmation is the message the shop would send for a placed order, kept as a row so that the demo and
// the tests can count them. Deliveries is how many times the handler ran for the order.
type Confirmation struct {
	bun.BaseModel `bun:"table:confirmations"`

	OrderID    int64     `bun:",pk"`
	EventID    uuid.UUID `bun:"type:uuid,notnull"`
	Customer   string    `bun:",notnull"`
	Deliveries int       `bun:",notnull"`
	HandledAt  time.Time `bun:",notnull"`
}

// HandleOrderPlaced returns the asynq handler of order.placed: it "sends" the confirmation by writing it
// into the confirmations table. A second delivery of the same order increments Deliveries instead of
// writing a second row: asynq delivers at least once, and the demo counts what a real sender would have
// sent twice. (A real handler would make the effect idempotent; see bunx's inbox.)
func HandleOrderPlaced(db bun.IDB) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		handledAt := time.Now()
		var p OrderPlaced
		if err := json.Unmarshal(t.Payload(), &p); err != nil {
			return fmt.Errorf("order.placed payload: %v: %w", err, asynq.SkipRetry)
		}
		if p.OrderID <= 0 {
			return fmt.Errorf("order.placed payload: order_id missing: %w", asynq.SkipRetry)
		}
		eventID, err := uuid.Parse(t.Headers()[wire.HeaderEventID])
		if err != nil {
			return fmt.Errorf("order.placed: header %s: %v: %w", wire.HeaderEventID, err, asynq.SkipRetry)
		}
		c := &Confirmation{OrderID: p.OrderID, EventID: eventID, Customer: p.Customer, Deliveries: 1, HandledAt: handledAt}
		_, err = db.NewInsert().Model(c).
			On("CONFLICT (order_id) DO UPDATE").
			Set("deliveries = ?TableAlias.deliveries + 1").
			Exec(ctx)
		if err != nil {
			return fmt.Errorf("write confirmation of order %d: %w", p.OrderID, err)
		}
		return nil
	}
}

// WorkerConfig tunes RunWorker. The zero value is ready to use.
type WorkerConfig struct {
	// Queue is the asynq queue the worker serves. Defaults to "default".
	Queue string
	// Concurrency is how many tasks run at once. Defaults to 20.
	Concurrency int
	// Logger receives the worker's errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// NewServer returns the asynq server of the shop's worker and its mux, with order.placed registered.
func NewServer(redis asynq.RedisConnOpt, db bun.IDB, cfg WorkerConfig) (*asynq.Server, *asynq.ServeMux) {
	logger := loggerOrDefault(cfg.Logger)
	concurrency := cfg.Concurrency
	if concurrency <= 0 {
		concurrency = 20
	}
	// worker.ServerConfig sets TaskCheckInterval to 10ms: with asynq's 1s default, an idle worker sleeps up to a
	// second before it sees a new task, however fast the relay was; and DelayedTaskCheckInterval to 100ms, so
	// scheduled tasks and retries are not up to 5s late (see docs/consumers.md).
	srv := asynq.NewServer(redis, worker.ServerConfig(asynq.Config{
		Concurrency: concurrency,
		Queues:      map[string]int{queueOrDefault(cfg.Queue): 1},
		LogLevel:    asynq.WarnLevel,
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			logger.LogAttrs(ctx, slog.LevelWarn, "task failed",
				slog.String("task_type", t.Type()), slog.String("err", err.Error()))
		}),
		ShutdownTimeout: 10 * time.Second,
	}))
	mux := asynq.NewServeMux()
	// The handler's span continues the trace of the request that placed the order (a no-op until the
	// application sets an OpenTelemetry TracerProvider and propagator).
	mux.Use(worker.TraceMiddleware(nil))
	mux.Handle(EventOrderPlaced, HandleOrderPlaced(db))
	return srv, mux
}

// RunWorker serves the shop's tasks until ctx is done, then shuts the server down, letting the tasks in
// flight finish, and returns nil. It never handles OS signals: cancel ctx (cmd/shop uses
// signal.NotifyContext).
func RunWorker(ctx context.Context, redis asynq.RedisConnOpt, db bun.IDB, cfg WorkerConfig) error {
	srv, mux := NewServer(redis, db, cfg)
	// A task type nobody handles is archived and logged at once instead of retried MaxRetry times.
	if err := srv.Start(worker.ArchiveUnrouted(mux, loggerOrDefault(cfg.Logger))); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	<-ctx.Done()
	srv.Shutdown()
	return nil
}

func loggerOrDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
