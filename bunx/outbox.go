package bunx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/bunbox/bunbox/internal/pgerr"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// Outbox writes events into the outbox_events table: explicitly with Record, or from the model hooks
// registered with OnInsert, OnUpdate and OnDelete. It is safe for concurrent use.
type Outbox struct {
	db    *bun.DB
	reg   *registry
	stmts *statements // the prepared INSERTs of db
}

// registry is what model hooks need of an Outbox: its handlers and limits. It holds no reference to the
// database, so the process-wide table of bindings never keeps a closed *bun.DB alive.
type registry struct {
	maxPayload int
	prepared   bool         // WithPreparedStatements: the prepared INSERT where bunx reaches the *sql.Tx or *sql.DB
	logger     *slog.Logger // WithLogger
	strict     bool         // WithStrictDispatch
	codec      *model.Codec // WithLocation's Codec; nil writes plain JSON
	tables     tables.Names // WithLocation's Schema and TablePrefix
	err        error        // an invalid option, returned by every write

	mu       sync.RWMutex
	handlers map[reflect.Type]*handlerSet
}

// Option configures an Outbox.
type Option func(*Outbox)

// WithMaxPayloadSize sets the largest event payload, in bytes of JSON, that the Outbox writes; a larger
// one fails the transaction. It is the one payload limit (model.WithMaxPayloadSize is deprecated and does
// nothing; NewEvent checks only the 64 MiB ceiling). A value above the 64 MiB ceiling
// counts as the ceiling; n <= 0 keeps the default. Defaults to 1 MiB.
func WithMaxPayloadSize(n int) Option {
	return func(o *Outbox) {
		if n > 0 {
			o.reg.maxPayload = min(n, wire.MaxPayloadSizeCeiling)
		}
	}
}

// WithPreparedStatements makes the Outbox write its events with a prepared INSERT, prepared once per
// connection where bunx reaches the *sql.Tx or *sql.DB under the caller's connection (a bun.Tx, a *bun.DB,
// and the queries of model hooks run on them): PostgreSQL then skips parsing and planning it in every
// transaction, which BENCHMARKS.md measures ("The pooler-safe default").
//
// Use it only where every connection is a server session of its own: a direct connection, or PgBouncer
// 1.21 or later with max_prepared_statements set. Behind a transaction pooler that does not track prepared
// statements (PgBouncer before 1.21, or 1.21+ without max_prepared_statements), the drivers name statements
// per client connection (pgdriver's "pgdriver-N", pgx's "pgx_N"), so one name means different statements
// on a shared server connection: writes fail (SQLSTATE 42P05 or 26000, after which the Outbox turns the
// prepared INSERT off) or, worse and undetectably, bind an event's values to another statement's columns.
// The prepared INSERT also bypasses bun's query hooks (bundebug, bunotel).
//
// Defaults to off: every event is written with a literal INSERT run through bun.
func WithPreparedStatements() Option {
	return func(o *Outbox) { o.reg.prepared = true }
}

// WithLogger sets the logger of the Outbox's warnings: trace context it left out of an event's metadata
// because the event would have gone over model's metadata limits with it (see Outbox.Record). A nil logger
// keeps the default. Defaults to slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *Outbox) {
		if l != nil {
			o.reg.logger = l
		}
	}
}

// New binds an Outbox to db: the model hooks of queries run through db (or its transactions) consult the
// handlers registered on it. Several Outboxes may be bound to one db; each writes the events of its own
// handlers. New panics if db is nil.
//
// The first New on a *bun.DB adds a query hook to it (bun's AddQueryHook, which is not safe while the db
// runs queries): call New at startup, before the db is shared between goroutines. The handlers of every
// Outbox stay bound to the db for as long as it lives: make one Outbox per db, not one per request.
func New(db *bun.DB, opts ...Option) *Outbox {
	if db == nil {
		panic("bunx.New: db must not be nil")
	}
	o := &Outbox{db: db, reg: &registry{maxPayload: wire.DefaultMaxPayloadSize, logger: slog.Default(), handlers: make(map[reflect.Type]*handlerSet)}}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	o.stmts = bind(db, o.reg)
	return o
}

// Record writes events into the outbox with db, in one statement. Pass the bun.Tx of the business change:
// the events then commit and roll back with it. With a *bun.DB or bun.Conn outside a transaction, the
// insert is a statement of its own and the atomicity guarantee does not hold.
//
// Every event is validated first (see model.Event.Validate); an invalid event, a nil one, two events with
// one id or an id already in the outbox (ErrDuplicateEvent, naming the id) fail the call, and nothing is written.
// Inside a transaction a failed Record also aborts the transaction, so the business change fails with it.
//
// If ctx carries an OpenTelemetry span, its trace context is added to each event's metadata with the
// application's propagator (otel.GetTextMapPropagator), so the handler's span continues the producer's
// trace (see TraceMiddleware and Inbox).
func (o *Outbox) Record(ctx context.Context, db bun.IDB, events ...*model.Event) error {
	if o == nil || o.reg == nil {
		return errors.New("bunx: Record on a nil Outbox: make it with bunx.New")
	}
	if db == nil {
		return errors.New("bunx: Record: db must not be nil")
	}
	if len(events) == 0 {
		return nil
	}
	// Record's caller holds the events: each gets the id and created_at PostgreSQL gave its row.
	conn, _ := idbConn(db)
	return o.reg.write(ctx, db.Dialect(), events, true, o.stmts, conn, func(ctx context.Context, query string) error {
		rows, err := db.QueryContext(ctx, "?", bun.Safe(query))
		if err != nil {
			return err
		}
		return scanReturning(rows, events)
	})
}

// scanReturning reads the id and created_at of each event from the rows of the INSERT's RETURNING, and
// closes them.
func scanReturning(rows *sql.Rows, events []*model.Event) error {
	defer rows.Close()
	for i := 0; rows.Next(); i++ {
		if i < len(events) {
			var micros int64
			if err := rows.Scan(&events[i].ID, &micros); err != nil {
				return err
			}
			events[i].CreatedAt = time.UnixMicro(micros).UTC()
		}
	}
	return rows.Err()
}

// write validates events and writes them with one INSERT (with insertReturning when returning is set, read
// back by scanReturning) on the caller's connection: prepared (see statements) when conn is the
// handle under it and stmts belong to conn's database, else the literal statement run by raw through bun,
// as the template "?" with the statement as its bun.Safe argument: bun's query hooks see it, and bun's
// formatter never reads the literals for placeholders.
func (r *registry) write(ctx context.Context, d schema.Dialect, events []*model.Event, returning bool,
	stmts *statements, conn sqlConn, raw func(ctx context.Context, query string) error) error {
	if r.err != nil {
		return r.err
	}
	if err := r.validate(events); err != nil {
		return err
	}
	r.injectTrace(ctx, events) // after validate: what the context adds never fails the write (see injectTrace)
	var callers []*model.Event // with a codec or bytes events: the caller's events; events are then the copies written
	if r.codec != nil || needsEncode(events) {
		encoded, err := r.encode(events)
		if err != nil {
			return err
		}
		callers, events = events, encoded
	}
	if stmts != nil && r.prepared && conn.db == stmts.db {
		if key, ok := preparedKey(events, returning); ok {
			key.table = r.tables.Outbox() // one statement per table: outboxes of several schemas share stmts
			if stmt := stmts.get(key); stmt != nil {
				err := writePrepared(ctx, conn.stmt(ctx, stmt), key, events, conn.tx != nil)
				copyReturned(callers, events, returning)
				if pgerr.Is(err, pgerr.InvalidSQLStatementName) || pgerr.Is(err, pgerr.DuplicatePreparedStatement) {
					// A pooler in transaction mode, or DEALLOCATE/DISCARD on the connection: this write
					// failed (its transaction is aborted), and the next ones write the literal INSERT.
					stmts.off.Store(true)
					return fmt.Errorf("bunx: the server lost or confused bunx's prepared outbox INSERT (a pooler in "+
						"transaction mode? drop bunx.WithPreparedStatements there); later writes use a literal INSERT: %w", err)
				}
				return err
			}
		}
	}
	query, err := insertSQL(d, r.tables.Outbox(), events, returning)
	if err != nil {
		return err
	}
	if err := raw(ctx, query); err != nil {
		return insertError(err)
	}
	return nil
}

// writePrepared runs the prepared INSERT of key; inTx says stmt is bound to the caller's transaction, and
// so closed here rather than at the end of it.
func writePrepared(ctx context.Context, stmt *sql.Stmt, key stmtKey, events []*model.Event, inTx bool) error {
	if inTx {
		defer stmt.Close()
	}
	args, err := preparedArgs(key, events)
	if err != nil {
		return err
	}
	if key.returning {
		rows, err := stmt.QueryContext(ctx, args...)
		if err == nil {
			err = scanReturning(rows, events)
		}
		if err != nil {
			return insertError(err)
		}
		return nil
	}
	if _, err := stmt.ExecContext(ctx, args...); err != nil {
		return insertError(err)
	}
	return nil
}

func (r *registry) validate(events []*model.Event) error {
	var seen map[uuid.UUID]struct{} // for many events; a few are compared with each other
	if len(events) > 8 {
		seen = make(map[uuid.UUID]struct{}, len(events))
	}
	for i, ev := range events {
		if ev == nil {
			return fmt.Errorf("%w: event %d of %d is nil", model.ErrInvalidEvent, i+1, len(events))
		}
		if ev.Queue == "" {
			ev.Queue = model.DefaultQueue
		}
		if ev.Payload == nil {
			ev.Payload = []byte("null")
		}
		if err := ev.Validate(r.payloadLimit()); err != nil {
			return err
		}
		if seen != nil {
			if _, dup := seen[ev.EventID]; dup {
				return duplicateEventError(ev.EventID)
			}
			seen[ev.EventID] = struct{}{}
		} else if slices.ContainsFunc(events[:i], func(p *model.Event) bool { return p.EventID == ev.EventID }) {
			return duplicateEventError(ev.EventID)
		}
	}
	return nil
}

// insertError turns the unique violation on event_id into an ErrDuplicateEvent naming the id. It reads
// the SQLSTATE and the constraint name, so it works with pgdriver and with pgx alike.
func insertError(err error) error {
	if f, ok := pgerr.From(err); ok && f.Code == pgerr.UniqueViolation &&
		strings.HasSuffix(f.Constraint, "outbox_events_event_id_key") { // with a Location's TablePrefix

		// Detail: Key (event_id)=(0192...) already exists.
		if i, j := strings.Index(f.Detail, "=("), strings.LastIndex(f.Detail, ")"); i >= 0 && j > i {
			if id, perr := uuid.Parse(f.Detail[i+2 : j]); perr == nil {
				return fmt.Errorf("%w (%s)", duplicateEventError(id), f.Message)
			}
		}
		return fmt.Errorf("%w: %w", ErrDuplicateEvent, err)
	}
	if isUndefinedTable(err) {
		return fmt.Errorf("bunx: the outbox table is missing: apply the migrations (bunboxmigrate.Up, or `bunbox migrate up`): %w", err)
	}
	return fmt.Errorf("bunx: write outbox events: %w", err)
}

func isUndefinedTable(err error) bool { return pgerr.Is(err, pgerr.UndefinedTable) }
