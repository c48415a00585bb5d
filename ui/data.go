package ui

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/internal/asynqtasks"
	"github.com/bunbox/bunbox/internal/badrow"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// queueRow is one queue's line in the backlog table: the outbox's side and, with Redis, asynq's.
type queueRow struct {
	Queue   string
	Pending int64
	Dead    int64
	Lag     time.Duration
	Asynq   *asynq.QueueInfo // nil without Redis, or when asynq has no such queue
}

// taskRow is a task asynq holds in its retry or archived set, with the handler's last error.
type taskRow struct {
	Queue   string
	State   string
	ID      string
	Bunbox  bool // a task of bunbox's event (internal/asynqtasks): it links to EventID's page
	EventID uuid.UUID
	Type    string
	Retried int
	LastErr string
	When    time.Time
}

// overview is everything the front page shows.
type overview struct {
	Backlog   admin.Backlog
	Queues    []queueRow
	Events    []admin.EventBacklog
	Blocked   []admin.BlockedKey
	Failing   []taskRow // asynq's retry and archived tasks
	Reconcile *reconcileState
	AsynqErr  string
	Stream    streamLane
}

// streamLane is the snapshot cursor (relay.EnableStream) of the outbox: one per outbox table today,
// shown as one lane named by its table.
type streamLane struct {
	Name string
	admin.StreamState
	Err string // the state could not be read
}

// reconcileState is what the page knows of the reconciler: who holds its lease and until when.
type reconcileState struct {
	Holder    string
	ExpiresAt time.Time
}

func (h *Handler) readOverview(ctx context.Context) (overview, error) {
	var o overview
	var err error
	if o.Backlog, err = h.admin.ReadBacklog(ctx); err != nil {
		return o, err
	}
	if o.Events, err = h.admin.ReadBacklogByEvent(ctx); err != nil {
		return o, err
	}
	if o.Blocked, err = h.admin.BlockedKeys(ctx, h.cfg.ListLimit); err != nil {
		return o, err
	}
	o.Reconcile = h.readReconcile(ctx)
	o.Stream.Name = h.names.Outbox()
	if o.Stream.StreamState, err = h.admin.ReadStream(ctx); err != nil {
		o.Stream.Err = err.Error()
		h.log.LogAttrs(ctx, slog.LevelWarn, "bunbox ui: read the stream's state", slog.Any("error", err))
	}
	byQueue := map[string]*queueRow{}
	for _, e := range o.Events {
		q := byQueue[e.Queue]
		if q == nil {
			q = &queueRow{Queue: e.Queue}
			byQueue[e.Queue] = q
		}
		q.Pending += e.Pending
		q.Dead += e.Dead
		q.Lag = max(q.Lag, e.Lag)
	}
	if h.inspector != nil {
		if err := h.readAsynq(byQueue, &o); err != nil {
			o.AsynqErr = err.Error()
		}
	}
	for _, q := range byQueue {
		o.Queues = append(o.Queues, *q)
	}
	sort.Slice(o.Queues, func(i, j int) bool { return o.Queues[i].Queue < o.Queues[j].Queue })
	return o, nil
}

// readAsynq adds asynq's counts per queue and its failing tasks.
func (h *Handler) readAsynq(byQueue map[string]*queueRow, o *overview) error {
	names, err := h.inspector.Queues()
	if err != nil {
		return fmt.Errorf("asynq queues: %w", err)
	}
	for _, name := range names {
		info, err := h.inspector.GetQueueInfo(name)
		if err != nil {
			return fmt.Errorf("asynq queue %q: %w", name, err)
		}
		q := byQueue[name]
		if q == nil {
			q = &queueRow{Queue: name}
			byQueue[name] = q
		}
		q.Asynq = info
		for _, list := range []struct {
			state string
			fn    func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error)
		}{{"retry", h.inspector.ListRetryTasks}, {"archived", h.inspector.ListArchivedTasks}} {
			tasks, err := list.fn(name, asynq.PageSize(h.cfg.ListLimit))
			if err != nil {
				return fmt.Errorf("asynq %s tasks of %q: %w", list.state, name, err)
			}
			for _, t := range tasks {
				when := t.NextProcessAt
				if list.state == "archived" {
					when = t.LastFailedAt
				}
				row := taskRow{Queue: name, State: list.state, ID: t.ID, Type: t.Type, Retried: t.Retried,
					LastErr: t.LastErr, When: when}
				if bt, ok := asynqtasks.Of(t); ok {
					row.Bunbox, row.EventID = true, bt.EventID
				}
				o.Failing = append(o.Failing, row)
			}
		}
	}
	return nil
}

// readReconcile reads the reconciler's lease when the schema has one (bunbox_leases); nil otherwise.
func (h *Handler) readReconcile(ctx context.Context) *reconcileState {
	var exists bool
	if err := h.db.NewRaw(h.names.SQL("SELECT to_regclass('bunbox_leases') IS NOT NULL")).Scan(ctx, &exists); err != nil || !exists {
		return nil
	}
	var st reconcileState
	err := h.db.NewRaw(h.names.SQL("SELECT holder, expires_at FROM bunbox_leases WHERE name = 'bunbox.reconciler'")).Scan(ctx, &st.Holder, &st.ExpiresAt)
	if err != nil {
		return nil
	}
	return &st
}

// eventList is one of the page's lists of events.
type eventList struct {
	State  string // pending, scheduled or dead
	Events []model.Event
}

var errUnknownState = errors.New("unknown state")

// eventsFrom is the table expression the page reads events from: outbox_events as oe, with for a streamed
// row (relay.EnableStream) published_shown, the published time the page shows (streamsql.PublishedAt:
// the cursor's moved_at once delivered, NULL while it waits; its published_at is 'infinity'), and
// stream_waiting, true while the cursor has not passed it.
func (h *Handler) eventsFrom() string {
	return h.names.SQL(`(SELECT e.*, ` + streamsql.PublishedAt + ` AS published_shown,
  ` + streamsql.Waiting + ` AS stream_waiting
FROM outbox_events e ` + streamsql.Cursor + `) AS oe`)
}

// selectEvents selects, on db, model.Event rows from eventsFrom, published_at as the page shows it, leniently
// (internal/badrow): a row written around bunx with metadata that is not an object of strings, or a time
// that is not finite, is listed with the others, marked bad in its metadata.
func (h *Handler) selectEvents(db bun.IDB, dst any) *bun.SelectQuery {
	return badrow.Select(db.NewSelect().Model(dst).ModelTableExpr(h.eventsFrom()), "oe", "oe.published_shown")
}

func (h *Handler) readEvents(ctx context.Context, state string) (eventList, error) {
	limit := int64(h.cfg.ListLimit)
	l := eventList{State: state}
	switch state {
	case "pending":
		// The per-row path's pending rows and the streamed rows waiting for the cursor (the first of them in
		// the cursor's order, (xid, id), read where each lane's waiting rows can be), merged by id.
		var streamed []model.Event
		if err := h.selectEvents(h.db, &l.Events).Where("oe.published_at IS NULL AND oe.dead_at IS NULL").
			Order("id").Limit(limit).Scan(ctx); err != nil {
			return l, err
		}
		waiting := h.names.SQL("oe.id IN (SELECT w.id FROM " + streamsql.WaitingRows + " w WHERE w.dead_at IS NULL ORDER BY w.xid, w.id LIMIT ?)")
		if err := store.ReadWithoutJIT(ctx, h.db, func(ctx context.Context, db bun.IDB) error {
			return h.selectEvents(db, &streamed).Where(waiting, limit).Order("xid", "id").Limit(limit).Scan(ctx)
		}); err != nil {
			return l, err
		}
		l.Events = append(l.Events, streamed...)
		sort.Slice(l.Events, func(i, j int) bool { return l.Events[i].ID < l.Events[j].ID })
		l.Events = l.Events[:min(len(l.Events), int(limit))]
		return l, nil
	case "scheduled":
		return l, h.selectEvents(h.db, &l.Events).Where("oe.published_at IS NOT NULL AND NOT oe.stream_waiting AND oe.process_at > now()").
			Order("process_at").Limit(limit).Scan(ctx)
	case "dead":
		return l, h.selectEvents(h.db, &l.Events).Where("oe.dead_at IS NOT NULL").Order("dead_at", "id").Limit(limit).Scan(ctx)
	default:
		return eventList{}, fmt.Errorf("%w %q: want pending, scheduled or dead", errUnknownState, state)
	}
}

// eventDetail is one event, with its asynq task when Redis is known.
type eventDetail struct {
	Event   model.Event
	Payload string
	// Stream says how the snapshot cursor (relay.EnableStream) delivers a streamed event: "waiting" or
	// "delivered" (its published time is then the cursor's last move, at or after its delivery); "" for
	// an event of the per-row path.
	Stream   string
	Task     *asynq.TaskInfo
	TaskNote string
}

func (h *Handler) readEvent(ctx context.Context, id uuid.UUID) (*eventDetail, error) {
	var ev model.Event
	if err := h.selectEvents(h.db, &ev).Where("event_id = ?", id).Scan(ctx); err != nil {
		return nil, err
	}
	var streamed, waiting bool
	if err := h.db.NewRaw("SELECT coalesce(oe.published_at = 'infinity', false), coalesce(oe.stream_waiting, false) FROM "+h.eventsFrom()+" WHERE oe.id = ?", ev.ID).
		Scan(ctx, &streamed, &waiting); err != nil {
		return nil, err
	}
	d := &eventDetail{Event: ev, Payload: indent(ev.Payload)}
	switch {
	case streamed && waiting:
		d.Stream = "waiting"
	case streamed:
		d.Stream = "delivered"
	}
	if desc := wire.DescribeEncoded(ev.Metadata, ev.PayloadEncoded, ev.Payload); desc != "" { // encrypted or compressed (a Location with a Codec, bunx.WithLocation): never the bytes
		d.Payload = desc
	}
	switch {
	case h.inspector == nil:
		d.TaskNote = "not looked up: the page was not given Redis"
	case d.Stream == "waiting":
		d.TaskNote = "not in asynq yet: the event waits in the stream for a relay's stream round"
	case ev.PublishedAt == nil:
		d.TaskNote = "not in asynq yet: the relay has not published the event"
	default:
		t, err := h.inspector.GetTaskInfo(ev.Queue, ev.EventID.String())
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			d.TaskNote = "not in asynq: completed and past its retention, deleted, or lost (the reconciler re-delivers a lost task within its window)"
		case err != nil:
			d.TaskNote = "asynq lookup failed: " + err.Error()
		default:
			d.Task = t
		}
	}
	return d, nil
}

// indent pretty-prints a JSON document for the page, or returns it as it is.
func indent(doc json.RawMessage) string {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return string(doc)
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // shown as written; the template escapes it for HTML
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return string(doc)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

var _ bun.IDB = (*bun.DB)(nil)

// errNoRows is what a lookup of an event that is not there returns.
var errNoRows = sql.ErrNoRows
