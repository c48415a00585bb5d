package model

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
)

// DefaultQueue is the asynq queue an event goes to unless WithQueue names another.
const DefaultQueue = "default"

// Event is one row of the outbox_events table: an event waiting to be relayed to asynq, or one that was.
//
// Build it with NewEvent, which validates it. The relay maps it onto an asynq task: type = Name,
// TaskID = EventID, queue = Queue, payload = Payload, and Metadata travels in the task headers.
type Event struct {
	bun.BaseModel `bun:"table:outbox_events,alias:oe"`

	// ID is the row's identity, assigned by PostgreSQL on insert; it orders the relay's claims.
	ID int64 `bun:"id,pk,autoincrement"`
	// EventID is the idempotency key and the asynq TaskID. NewEvent makes a UUIDv7 unless WithEventID gives one.
	EventID uuid.UUID `bun:"event_id,type:uuid,notnull"`
	// Name is the event name, which becomes the asynq task type (e.g. "order.placed").
	Name string `bun:"event_name,notnull"`
	// Queue is the asynq queue the task is enqueued into. Defaults to DefaultQueue.
	Queue string `bun:"queue,notnull"`
	// Payload is the JSON document the handler receives as the task payload; for an event of
	// NewBytesEvent (metadata bunbox-payload-format "bytes"), the opaque bytes, which are not JSON.
	Payload json.RawMessage `bun:"payload,type:jsonb,notnull"`
	// PayloadEncoded is the payload as an Outbox's Codec encoded it (bunx.WithLocation): compressed, encrypted
	// or both, as the metadata's bunbox-payload-encoding says; or the bytes of a bytes event (NewBytesEvent)
	// as they are when no codec encoded them. Payload is then JSON null. Nil for a plain JSON payload.
	PayloadEncoded []byte `bun:"payload_encoded,type:bytea"`
	// Metadata travels with the event in the asynq task headers (trace context, tenant, ...).
	Metadata map[string]string `bun:"metadata,type:jsonb,notnull"`
	// CreatedAt is set by PostgreSQL when the row is inserted (the transaction's start time).
	CreatedAt time.Time `bun:"created_at,nullzero,notnull,default:current_timestamp"`

	// Delivery options (WithProcessAt and the options after it), mapped by the relay onto asynq's
	// options of the same name. Each is nullable: unset means asynq's default.

	// ProcessAt is when the task may be processed; asynq holds it in its scheduled set until then. Set by
	// WithProcessAt, or by WithProcessIn as the absolute time the delay ends.
	ProcessAt *time.Time `bun:"process_at,nullzero"`
	// MaxRetry is how many times asynq retries the task after its handler fails (asynq's default is 25).
	MaxRetry *int `bun:"max_retry"`
	// Timeout is how long one run of the handler may take; 0 means asynq's default (30 minutes, unless a
	// Deadline is set). asynq keeps whole seconds.
	Timeout time.Duration `bun:"timeout_ns,nullzero"`
	// Deadline is when the handler's context expires, on every run.
	Deadline *time.Time `bun:"deadline,nullzero"`
	// Group is the asynq group the task is aggregated in (asynq's task aggregation); empty for none.
	Group string `bun:"task_group,nullzero"`
	// TaskRetention keeps the completed task in Redis (asynq's Retention: the event's dedupe window) for
	// this long when it is longer than the relay's Config.TaskRetention; 0 means the relay's. asynq keeps
	// whole seconds. (Not PublishedRetention, how long the relay keeps published rows.)
	TaskRetention time.Duration `bun:"retention_ns,nullzero"`

	// PublishedAt is when the relay handed the event to asynq; nil while it is pending. A row the stream
	// wrote (relay.EnableStream) reads nil too, delivered or not: its published_at holds 'infinity', as
	// the stream keeps no time per row (`bunbox status`, `bunbox stream status` and admin.Outbox.ReadStream say
	// how far the stream has delivered). Event's bun hooks (BeforeSelect, BeforeInsert) make plain bun work
	// on such rows:
	//
	//   - A SELECT run by Scan or ScanAndCount reads the column as nullif(published_at, 'infinity') where
	//     it selects it by name: every column, or a Column list naming it. A list without it, or the
	//     caller's own ColumnExpr for it, is kept as given. WHERE sees the column as stored
	//     (published_at = 'infinity' finds the streamed rows), as does ORDER BY oe.published_at.
	//   - An INSERT whose rows all leave PublishedAt nil leaves the column to its default ('infinity'
	//     while the stream is on), so that RETURNING does not read it back.
	//
	// The hooks cannot reach a raw query (NewRaw, QueryContext: SELECT * fails on a streamed row), a
	// ColumnExpr such as "oe.*", SelectQuery.Exec or Rows, a relation to Event, or an insert's
	// Returning("*"): there, list the columns and read nullif(published_at, 'infinity') AS published_at.
	// Change rows with a Column list naming what changes: bun's NewUpdate().Model(ev) writes every
	// column, published_at = DEFAULT when PublishedAt is nil.
	PublishedAt *time.Time `bun:"published_at,nullzero"`
	// Attempts counts the relay's failed attempts to enqueue the event.
	Attempts int `bun:"attempts,notnull"`
	// NextAttemptAt holds a failed event back until then; nil means "as soon as possible".
	NextAttemptAt *time.Time `bun:"next_attempt_at,nullzero"`
	// LastError is the error of the last failed attempt.
	LastError string `bun:"last_error,nullzero"`
	// DeadAt is when the relay gave up on the event after its maximum attempts; dead events are kept
	// and can be retried by the operator.
	DeadAt *time.Time `bun:"dead_at,nullzero"`

	// OrderingKey puts the event in the ordered sequence of its key (see WithOrderingKey); empty (NULL)
	// for an unordered event.
	OrderingKey string `bun:"ordering_key,nullzero"`
	// CompletedAt is when the relay saw the asynq task of a keyed event completed (every listener's task,
	// with Routes), which releases the next event of its key; nil until then, and for unkeyed events.
	CompletedAt *time.Time `bun:"completed_at,nullzero"`
}
