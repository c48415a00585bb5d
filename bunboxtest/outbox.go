package bunboxtest

import (
	"context"
	"fmt"
	"slices"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// Outbox says which outbox Events and Drain read, as the Outbox under test was made. The zero value is
// the default outbox: outbox_events through search_path, payloads as written.
type Outbox struct {
	// Location is that of bunx.WithLocation (see model.Location): its Schema and TablePrefix name the
	// table, and with its Codec the payloads are decoded, as the relay's Config.Location.Codec does. A
	// Location that model.Location.Validate refuses fails Events and Drain with an error naming the field.
	// Defaults to the zero Location.
	Location model.Location
}

// Events reads the events of the default outbox: see Outbox.Events.
func Events(ctx context.Context, db bun.IDB, names ...string) ([]*model.Event, error) {
	return Outbox{}.Events(ctx, db, names...)
}

// Drain hands the pending events of the default outbox to h: see Outbox.Drain.
func Drain(ctx context.Context, db bun.IDB, h asynq.Handler) (int, error) {
	return Outbox{}.Drain(ctx, db, h)
}

// Events returns the events in the outbox as db sees them, oldest first, of the given names only when
// names are given: pass the bun.Tx of the test to see what it wrote before it commits, or the *bun.DB to
// see what committed. Every row is returned, delivered or not (PublishedAt, DeadAt say which); a row of the
// snapshot stream reads with PublishedAt nil while it waits, and with the time the stream's cursor last
// moved once the cursor has passed it (the stream keeps no time per row). With Location.Codec
// the payloads are decoded; without it an encoded payload stays in PayloadEncoded.
func (o Outbox) Events(ctx context.Context, db bun.IDB, names ...string) ([]*model.Event, error) {
	return o.read(ctx, db, false, names)
}

// rowsSQL is the outbox's rows with what tells a streamed row's state (internal/streamsql): the time it
// shows as published (the cursor's last move once the cursor passed it, NULL while it waits) and whether
// it waits for delivery, a pending row of the per-row path or a streamed row the cursor has not passed.
const rowsSQL = `(SELECT e.*, ` + streamsql.PublishedAt + ` AS shown_published_at,
  (e.published_at IS NULL OR ` + streamsql.Waiting + `) AS waiting
FROM outbox_events e ` + streamsql.Cursor + `) AS oe`

// read reads the events of the outbox (pending ones only, when pending), oldest first, decoded with Location.Codec.
func (o Outbox) read(ctx context.Context, db bun.IDB, pending bool, names []string) ([]*model.Event, error) {
	if db == nil {
		return nil, errNilDB
	}
	if err := o.Location.Validate(); err != nil {
		return nil, fmt.Errorf("bunboxtest: Outbox: %w", err)
	}
	t, _ := tables.New(o.Location.Schema, o.Location.TablePrefix)
	var evs []*model.Event
	q := db.NewSelect().Model(&evs).ModelTableExpr(t.SQL(rowsSQL)).
		ExcludeColumn("published_at").
		ColumnExpr("oe.shown_published_at AS published_at").
		OrderExpr("oe.id")
	if len(names) > 0 {
		q = q.Where("oe.event_name IN (?)", bun.List(slices.Clip(names)))
	}
	if pending {
		q = q.Where("oe.waiting AND oe.dead_at IS NULL AND oe.cancelled_at IS NULL")
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("bunboxtest: read %s: %w", t.Outbox(), err)
	}
	for _, ev := range evs {
		if err := o.decode(ev); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

// decode makes ev's payload the one its task carries, as the relay does: decoded with Location.Codec, or without
// one the encoded bytes as they are.
func (o Outbox) decode(ev *model.Event) error {
	if ev.PayloadEncoded == nil {
		return nil
	}
	if o.Location.Codec == nil {
		ev.Payload, ev.PayloadEncoded = ev.PayloadEncoded, nil
		return nil
	}
	if err := o.Location.Codec.DecodeEvent(ev); err != nil {
		return fmt.Errorf("bunboxtest: decode the payload of event %s (%s): %w", ev.EventID, ev.Name, err)
	}
	return nil
}
