package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
)

// DeadFilter selects dead events for RetryDeadWhere, PurgeDead and CountDead. The set fields combine
// with AND; a filter that sets none of them selects nothing and is an error, unless All is set, so that a
// forgotten flag never touches every dead event.
type DeadFilter struct {
	// EventIDs selects the dead events with these ids. Defaults to any id.
	EventIDs []uuid.UUID
	// Names selects the dead events with one of these names. Defaults to any name.
	Names []string
	// OlderThan selects the events dead for at least this long, on PostgreSQL's clock. Defaults to 0: any.
	OlderThan time.Duration
	// All selects every dead event when no other field is set. Defaults to false.
	All bool
}

// ErrEmptyDeadFilter is returned for a DeadFilter that selects nothing and does not set All.
var ErrEmptyDeadFilter = errors.New("admin: dead event filter is empty: give event ids, names or an age, or set All")

func (f DeadFilter) where(q *bun.SelectQuery) (*bun.SelectQuery, error) {
	if len(f.EventIDs) == 0 && len(f.Names) == 0 && f.OlderThan == 0 && !f.All {
		return nil, ErrEmptyDeadFilter
	}
	if f.OlderThan < 0 {
		return nil, fmt.Errorf("admin: DeadFilter.OlderThan must not be negative, got %s", f.OlderThan)
	}
	q = q.Where("dead_at IS NOT NULL")
	if len(f.EventIDs) > 0 {
		q = q.Where("event_id = ANY(?::uuid[])", pgdialect.Array(uuidStrings(f.EventIDs)))
	}
	if len(f.Names) > 0 {
		q = q.Where("event_name = ANY(?)", pgdialect.Array(f.Names))
	}
	if f.OlderThan > 0 {
		q = q.Where("dead_at <= now() - ? * interval '1 microsecond'", f.OlderThan.Microseconds())
	}
	return q, nil
}

// selectDead returns the ids of the rows f selects, as a subquery.
func selectDead(db bun.IDB, names tables.Names, f DeadFilter) (*bun.SelectQuery, error) {
	return f.where(outboxSelect(db, names).Column("id"))
}

// outboxSelect is a SELECT from the outbox table of names.
func outboxSelect(db bun.IDB, names tables.Names) *bun.SelectQuery {
	if names.IsDefault() {
		return db.NewSelect().Table("outbox_events")
	}
	return db.NewSelect().TableExpr(names.Outbox())
}

// CountDead counts the dead events f selects.
func (o *Outbox) CountDead(ctx context.Context, f DeadFilter) (int64, error) {
	db, names := o.db, o.names
	q, err := f.where(outboxSelect(db, names))
	if err != nil {
		return 0, err
	}
	n, err := q.Count(ctx)
	if err != nil {
		return 0, fmt.Errorf("admin: count dead events: %w", err)
	}
	return int64(n), nil
}

// RetryDeadWhere puts the dead events f selects back in line, like RetryDead, and returns how many; a
// cancelled one (bunx.Outbox.Cancel) is left alone.
func (o *Outbox) RetryDeadWhere(ctx context.Context, f DeadFilter) (int64, error) {
	db, names := o.db, o.names
	sub, err := selectDead(db, names, f)
	if err != nil {
		return 0, err
	}
	upd := db.NewUpdate().Table("outbox_events")
	if !names.IsDefault() {
		upd = db.NewUpdate().TableExpr(names.Outbox())
	}
	res, err := upd.
		Set("dead_at = NULL, attempts = 0, next_attempt_at = NULL, published_at = NULL"). // see RetryDead
		Where("id IN (?) AND dead_at IS NOT NULL AND cancelled_at IS NULL", sub).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("admin: retry dead events: %w", err)
	}
	return res.RowsAffected()
}

// PurgeDead deletes the dead events f selects, for good, and returns how many.
func (o *Outbox) PurgeDead(ctx context.Context, f DeadFilter) (int64, error) {
	db, names := o.db, o.names
	sub, err := selectDead(db, names, f)
	if err != nil {
		return 0, err
	}
	del := db.NewDelete().Table("outbox_events")
	if !names.IsDefault() {
		del = db.NewDelete().TableExpr(names.Outbox())
	}
	res, err := del.Where("id IN (?) AND dead_at IS NOT NULL", sub).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("admin: purge dead events: %w", err)
	}
	return res.RowsAffected()
}

// EventBacklog is the state of the outbox rows of one queue and event name.
type EventBacklog struct {
	Queue     string
	EventName string
	// Pending counts the rows not yet published, not dead and not cancelled.
	Pending int64
	// Dead counts the rows the relay gave up on.
	Dead int64
	// Lag is the age of the oldest pending row; 0 when none is pending.
	Lag time.Duration
}

// ReadBacklogByEvent reads the backlog of each queue and event name that has pending or dead rows,
// ordered by queue and name, using the partial indexes: like ReadBacklog, its cost follows the backlog,
// not the table. Streamed rows the cursor has not delivered count as pending, as in ReadBacklog.
func (o *Outbox) ReadBacklogByEvent(ctx context.Context) ([]EventBacklog, error) {
	var rows []struct {
		Queue     string  `bun:"queue"`
		EventName string  `bun:"event_name"`
		Pending   int64   `bun:"pending"`
		Dead      int64   `bun:"dead"`
		Lag       float64 `bun:"lag"`
	}
	names := o.names
	err := store.ReadWithoutJIT(ctx, o.db, func(ctx context.Context, db bun.IDB) error {
		return db.NewRaw(names.SQL(`SELECT queue, event_name, sum(pending)::bigint AS pending, sum(dead)::bigint AS dead, max(lag) AS lag FROM (
  SELECT queue, event_name, count(*) AS pending, 0 AS dead,
    extract(epoch FROM clock_timestamp() - min(created_at))::float8 AS lag
  FROM outbox_events WHERE published_at IS NULL AND dead_at IS NULL AND cancelled_at IS NULL GROUP BY queue, event_name
  UNION ALL
  SELECT e.queue, e.event_name, count(*), 0, extract(epoch FROM clock_timestamp() - min(e.created_at))::float8
  FROM `+streamsql.PendingRows+` e GROUP BY e.queue, e.event_name
  UNION ALL
  SELECT queue, event_name, 0, count(*), 0 FROM outbox_events WHERE dead_at IS NOT NULL GROUP BY queue, event_name
) AS b GROUP BY queue, event_name ORDER BY queue, event_name`)).Scan(ctx, &rows)
	})
	if err != nil {
		return nil, fmt.Errorf("admin: read outbox backlog by event: %w", err)
	}
	out := make([]EventBacklog, len(rows))
	for i, r := range rows {
		out[i] = EventBacklog{Queue: r.Queue, EventName: r.EventName, Pending: r.Pending, Dead: r.Dead,
			Lag: time.Duration(max(r.Lag, 0) * float64(time.Second))}
	}
	return out, nil
}
