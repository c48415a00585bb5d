package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// Inbox makes asynq handlers exactly-once in effect. asynq delivers at least once: a worker that dies after
// the work but before the acknowledgement gets the task again. A handler wrapped by the Inbox runs its work
// in a bun transaction that also records (event id, handler name) in the inbox_events table; a repeated
// delivery finds the record and is acknowledged without running the work again. Two deliveries racing each
// other serialise on the record's primary key, and the loser sees the winner's commit.
//
// The guarantee covers the work done with the handler's bun.Tx. Side effects outside the database (an
// e-mail, an HTTP call) can still repeat when the transaction fails after them; give them the event id as
// their own idempotency key.
type Inbox struct {
	db      *bun.DB
	logger  *slog.Logger
	tracing *tracing
	codec   *model.Codec // WithLocation's Codec
	tables  tables.Names // WithLocation's Schema and TablePrefix
	err     error        // an invalid option: every task fails with it
}

// NewInbox returns an Inbox that records handled events in db's inbox_events table (see the migrate package).
func NewInbox(db *bun.DB, opts ...Option) *Inbox {
	if db == nil {
		panic("worker.NewInbox: db must not be nil")
	}
	o := applyOptions(opts)
	return &Inbox{db: db, logger: cmp.Or(o.logger, defaultInboxLogger()), tracing: newTracing(o.tp), codec: o.codec,
		tables: o.tables, err: o.err}
}

// ErrMalformedTask is wrapped (with asynq.SkipRetry, so asynq archives the task instead of retrying it
// forever) by the error of a task whose bunbox headers or payload cannot be read.
var ErrMalformedTask = errors.New("worker: malformed task")

// Handler wraps fn as an asynq handler that runs at most once per event for the handler name. fn runs in a
// transaction of the Inbox's database: return an error to roll its work back (and the inbox record with
// it) and let asynq retry. name identifies the handler in the inbox: keep it stable across deploys, and
// give every handler of one event a name of its own.
//
// A task whose payload an Outbox's codec encoded and the relay passed through reaches fn decoded (see
// WithLocation and DecodeTask), as a new task without a ResultWriter.
//
// The handler runs in a consumer span that continues the producer's trace, as TraceMiddleware's does (and
// behind TraceMiddleware, in its span), with the handler name as the bunbox.handler attribute.
func (in *Inbox) Handler(name string, fn func(ctx context.Context, tx bun.Tx, t *asynq.Task) error) asynq.Handler {
	switch {
	case in == nil:
		panic("worker.Inbox.Handler: the Inbox is nil")
	case name == "":
		panic("worker.Inbox.Handler: the handler name must not be empty")
	case fn == nil:
		panic(fmt.Sprintf("worker.Inbox.Handler(%q): fn must not be nil", name))
	}
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return in.tracing.run(ctx, t, name, func(ctx context.Context) error { return in.handle(ctx, name, t, fn) })
	})
}

func (in *Inbox) handle(ctx context.Context, name string, t *asynq.Task, fn func(ctx context.Context, tx bun.Tx, t *asynq.Task) error) error {
	id, err := TaskEventID(t)
	if err != nil {
		in.logger.LogAttrs(ctx, slog.LevelError, "bunbox inbox: rejecting task",
			slog.String("handler", name), slog.String("task_type", t.Type()), slog.Any("err", err))
		return err
	}
	if in.err != nil {
		in.logger.LogAttrs(ctx, slog.LevelError, "bunbox inbox: misconfigured", slog.String("handler", name), slog.Any("err", in.err))
		return in.err
	}
	if t, err = DecodeTask(in.codec, t); err != nil {
		in.logger.LogAttrs(ctx, slog.LevelError, "bunbox inbox: payload does not decode",
			slog.String("handler", name), slog.String("event_id", id.String()), slog.Any("err", err))
		return err
	}
	var duplicate bool
	err = in.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewRaw(in.tables.SQL("INSERT INTO inbox_events (event_id, handler) VALUES (?, ?) ON CONFLICT DO NOTHING"), id, name).
			Exec(ctx)
		if err != nil {
			return inboxError(err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			duplicate = err == nil
			return err
		}
		return fn(bunx.ContextWithTx(ctx, tx), tx, t)
	})
	if duplicate {
		in.logger.LogAttrs(ctx, slog.LevelInfo, "bunbox inbox: duplicate delivery acknowledged",
			slog.String("handler", name), slog.String("event_id", id.String()))
	}
	if err != nil {
		in.logFailure(ctx, name, t, id, err)
	}
	return err
}

// defaultInboxLogger writes Warn and above to stderr.
func defaultInboxLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// logFailure logs a handler's error, with what asynq does with the task next, as asynq decides it
// (its processor's handleFailedMessage): at Error when asynq archives the task and will not retry it,
// that is on its last attempt (retried >= max_retry: with MaxRetry(1), the second run) or for an error
// wrapping asynq.SkipRetry; at Warn when asynq retries it, or drops it for asynq.RevokeTask. The line names
// the task: type, id, queue, the event and the handler. A worker shutting down (ctx cancelled) is not a
// failure.
func (in *Inbox) logFailure(ctx context.Context, name string, t *asynq.Task, id uuid.UUID, err error) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return
	}
	retried, okRetried := asynq.GetRetryCount(ctx)
	maxRetry, okMax := asynq.GetMaxRetry(ctx)
	level, msg := slog.LevelWarn, "bunbox inbox: handler failed, asynq retries the task"
	switch {
	case errors.Is(err, asynq.RevokeTask):
		msg = "bunbox inbox: handler failed with asynq.RevokeTask: asynq drops the task, neither retried nor archived"
	case errors.Is(err, asynq.SkipRetry):
		level, msg = slog.LevelError, "bunbox inbox: handler failed, asynq archives the task and will not retry it (asynq.SkipRetry)"
	case okRetried && okMax && retried >= maxRetry:
		level, msg = slog.LevelError, "bunbox inbox: handler failed on the task's last attempt, asynq archives the task and will not retry it"
	}
	attrs := make([]slog.Attr, 0, 9)
	attrs = append(attrs, slog.String("handler", name), slog.String("task_type", t.Type()))
	if tid, ok := asynq.GetTaskID(ctx); ok {
		attrs = append(attrs, slog.String("task_id", tid))
	}
	if q, ok := asynq.GetQueueName(ctx); ok {
		attrs = append(attrs, slog.String("queue", q))
	}
	attrs = append(attrs, slog.String("event_id", id.String()))
	if okRetried {
		attrs = append(attrs, slog.Int("retried", retried))
	}
	if okMax {
		attrs = append(attrs, slog.Int("max_retry", maxRetry))
	}
	in.logger.LogAttrs(ctx, level, msg, append(attrs, slog.Any("err", err))...)
}

// HandleJSON wraps fn like Inbox.Handler, decoding the task's JSON payload into a T first (after the
// Inbox's codec decoded an encoded payload, see WithLocation). A payload that does not decode is
// archived by asynq (ErrMalformedTask with asynq.SkipRetry), not retried forever; so is the payload of an
// event of bytes (model.NewBytesEvent), never decoded as JSON: the error wraps model.ErrNotJSON and names
// the event. Read bytes with Inbox.Handler and t.Payload().
func HandleJSON[T any](in *Inbox, name string, fn func(ctx context.Context, tx bun.Tx, payload *T) error) asynq.Handler {
	if fn == nil {
		panic(fmt.Sprintf("worker.HandleJSON(%q): fn must not be nil", name))
	}
	return in.Handler(name, func(ctx context.Context, tx bun.Tx, t *asynq.Task) error {
		p, err := decodePayload[T](t)
		if err != nil {
			return err
		}
		return fn(ctx, tx, p)
	})
}

// decodePayload decodes the task's JSON payload into a new T; a payload that does not decode gives an
// error wrapping ErrMalformedTask and asynq.SkipRetry.
func decodePayload[T any](t *asynq.Task) (*T, error) {
	p := new(T)
	if wire.IsBytes(t.Headers()) {
		return nil, fmt.Errorf("%w: %s: event %s: %w: HandleJSON does not decode it into %T (read it with Inbox.Handler): %w",
			ErrMalformedTask, t.Type(), t.Headers()[wire.HeaderEventID], model.ErrNotJSON, p, asynq.SkipRetry)
	}
	if err := json.Unmarshal(t.Payload(), p); err != nil {
		return nil, fmt.Errorf("%w: %s: payload does not decode into %T: %w: %w", ErrMalformedTask, t.Type(), p, err, asynq.SkipRetry)
	}
	return p, nil
}

// TaskEventID reads the event id the relay put in the task's headers. A task without a valid one (not
// enqueued by the relay, or tampered with) gets an error wrapping ErrMalformedTask and asynq.SkipRetry.
func TaskEventID(t *asynq.Task) (uuid.UUID, error) {
	raw, ok := t.Headers()[wire.HeaderEventID]
	if !ok {
		return uuid.Nil, fmt.Errorf("%w: %s: no %s header: %w", ErrMalformedTask, t.Type(), wire.HeaderEventID, asynq.SkipRetry)
	}
	id, err := uuid.Parse(raw)
	if err != nil || id == uuid.Nil {
		return uuid.Nil, fmt.Errorf("%w: %s: header %s=%q is not an event id: %w", ErrMalformedTask, t.Type(), wire.HeaderEventID, raw, asynq.SkipRetry)
	}
	return id, nil
}

func inboxError(err error) error {
	if pgerr.Is(err, pgerr.UndefinedTable) {
		return fmt.Errorf("worker: the inbox table is missing: apply the migrations (bunboxmigrate.Up, or `bunbox migrate up`): %w", err)
	}
	return fmt.Errorf("worker: record event: %w", err)
}
