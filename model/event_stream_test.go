package model_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// publishedTime is the published_at of streamRows' per-row published row.
var publishedTime = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// streamRows returns a pool on a fresh migrated schema with the stream on (relay.EnableStream) and three
// events Outbox.Record wrote there: streamed, as the stream leaves it (published_at 'infinity'); pending
// on the per-row path (NULL); and published by the per-row path (publishedTime).
func streamRows(t *testing.T) (db *bun.DB, streamed, pending, published *model.Event) {
	t.Helper()
	ctx := context.Background()
	db, _ = outboxtest.Schema(t)
	if err := relay.EnableStream(ctx, db, model.Location{}); err != nil {
		t.Fatalf("EnableStream: %v", err)
	}
	evs := make([]*model.Event, 3)
	for i := range evs {
		ev, err := model.NewEvent("stream.read", map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = ev
	}
	if err := bunx.New(db).Record(ctx, db, evs...); err != nil {
		t.Fatalf("Record: %v", err)
	}
	if n := outboxtest.Count(t, db, "outbox_events", "published_at = 'infinity'"); n != 3 {
		t.Fatalf("Record with the stream on wrote %d rows with published_at 'infinity', want 3", n)
	}
	if _, err := db.ExecContext(ctx, `UPDATE outbox_events SET published_at = CASE id WHEN ? THEN NULL ELSE ?::timestamptz END
  WHERE id IN (?, ?)`, evs[1].ID, publishedTime, evs[1].ID, evs[2].ID); err != nil {
		t.Fatal(err)
	}
	return db, evs[0], evs[1], evs[2]
}

// checkRead checks the events read back: each of want by id, with the PublishedAt the row means (nil for
// streamed and pending, publishedTime for published).
func checkRead(t *testing.T, got []model.Event, want ...*model.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.ID || g.EventID != w.EventID {
			t.Fatalf("event %d: read id %d (%s), want %d (%s)", i, g.ID, g.EventID, w.ID, w.EventID)
		}
		if (g.PublishedAt == nil) != (w.PublishedAt == nil) ||
			g.PublishedAt != nil && !g.PublishedAt.Equal(*w.PublishedAt) {
			t.Fatalf("event %d (id %d): PublishedAt %v, want %v", i, g.ID, g.PublishedAt, w.PublishedAt)
		}
	}
}

// TestEventReadsStreamedRows reads rows the stream wrote with plain bun, in each form a user writes: a
// streamed row reads with a nil PublishedAt, a published row with its time, and an explicit column list
// is kept as given.
func TestEventReadsStreamedRows(t *testing.T) {
	db, streamed, pending, published := streamRows(t)
	published.PublishedAt = &publishedTime
	all := []*model.Event{streamed, pending, published}
	ctx := context.Background()

	t.Run("slice", func(t *testing.T) {
		var got []model.Event
		if err := db.NewSelect().Model(&got).Order("id").Scan(ctx); err != nil {
			t.Fatalf("Model(&[]model.Event).Scan: %v", err)
		}
		checkRead(t, got, all...)
		if string(got[0].Payload) != `{"n": 0}` || got[0].Name != "stream.read" {
			t.Fatalf("streamed row read as %q %s", got[0].Name, got[0].Payload)
		}
	})
	t.Run("pointer slice", func(t *testing.T) {
		var got []*model.Event
		if err := db.NewSelect().Model(&got).Order("id").Scan(ctx); err != nil {
			t.Fatalf("Model(&[]*model.Event).Scan: %v", err)
		}
		checkRead(t, []model.Event{*got[0], *got[1], *got[2]}, all...)
	})
	t.Run("WherePK", func(t *testing.T) {
		got := model.Event{ID: streamed.ID}
		if err := db.NewSelect().Model(&got).WherePK().Scan(ctx); err != nil {
			t.Fatalf("Model(&ev).WherePK().Scan: %v", err)
		}
		checkRead(t, []model.Event{got}, streamed)
	})
	t.Run("Where", func(t *testing.T) {
		var got model.Event
		if err := db.NewSelect().Model(&got).Where("event_id = ?", streamed.EventID).Scan(ctx); err != nil {
			t.Fatalf("Model(&ev).Where(event_id).Scan: %v", err)
		}
		checkRead(t, []model.Event{got}, streamed)
	})
	t.Run("Where on the column as stored", func(t *testing.T) {
		// WHERE reads the table's column, 'infinity' included: the hook changes only the select list.
		var got []model.Event
		if err := db.NewSelect().Model(&got).Where("published_at = 'infinity'").Scan(ctx); err != nil {
			t.Fatal(err)
		}
		checkRead(t, got, streamed)
	})
	t.Run("Column list without published_at", func(t *testing.T) {
		var got []model.Event
		q := db.NewSelect().Model(&got).Column("id", "event_id").Order("id")
		if err := q.Scan(ctx); err != nil {
			t.Fatalf("Column(id, event_id).Scan: %v", err)
		}
		if got[2].PublishedAt != nil || got[2].Name != "" {
			t.Fatalf("Column(id, event_id) read more than its columns: %+v", got[2])
		}
		checkRead(t, got, streamed, pending, &model.Event{ID: published.ID, EventID: published.EventID})
		if s := q.String(); s != `SELECT "oe"."id", "oe"."event_id" FROM "outbox_events" AS "oe" ORDER BY "id"` {
			t.Fatalf("the column list changed: %s", s)
		}
	})
	t.Run("Column list with published_at", func(t *testing.T) {
		var got []model.Event
		if err := db.NewSelect().Model(&got).Column("id", "event_id", "published_at").Order("id").Scan(ctx); err != nil {
			t.Fatalf("Column(id, event_id, published_at).Scan: %v", err)
		}
		checkRead(t, got, all...)
		if got[2].Name != "" {
			t.Fatalf("Column(id, event_id, published_at) read more than its columns: %+v", got[2])
		}
	})
	t.Run("the caller's own expression", func(t *testing.T) {
		// What the field's doc told users to write before the hook: it still works, unchanged.
		var got []model.Event
		if err := db.NewSelect().Model(&got).ExcludeColumn("published_at").
			ColumnExpr("nullif(published_at, 'infinity') AS published_at").Order("id").Scan(ctx); err != nil {
			t.Fatalf("ExcludeColumn + ColumnExpr: %v", err)
		}
		checkRead(t, got, all...)
	})
	t.Run("a joined table with a published_at", func(t *testing.T) {
		var got []model.Event
		if err := db.NewSelect().Model(&got).Join("JOIN (SELECT now() AS published_at) AS x ON true").
			Order("oe.id").Scan(ctx); err != nil {
			t.Fatalf("Model(&events).Join(...).Scan: %v", err)
		}
		checkRead(t, got, all...)
	})
	t.Run("ModelTableExpr", func(t *testing.T) {
		// The table named as a Location with a Schema names it (the alias stays oe).
		var schema string
		if err := db.NewRaw("SELECT current_schema()").Scan(ctx, &schema); err != nil {
			t.Fatal(err)
		}
		var got []model.Event
		if err := db.NewSelect().Model(&got).ModelTableExpr("?.outbox_events AS oe", bun.Ident(schema)).
			Order("id").Scan(ctx); err != nil {
			t.Fatalf("Model(&events).ModelTableExpr(schema.outbox_events AS oe).Scan: %v", err)
		}
		checkRead(t, got, all...)
	})
	t.Run("nil model", func(t *testing.T) {
		var got []model.Event
		if err := db.NewSelect().Model((*model.Event)(nil)).Order("id").Scan(ctx, &got); err != nil {
			t.Fatalf("Model((*model.Event)(nil)).Scan(ctx, &events): %v", err)
		}
		checkRead(t, got, all...)
		var ids []uuid.UUID
		if err := db.NewSelect().Model((*model.Event)(nil)).Column("event_id").Order("id").Scan(ctx, &ids); err != nil {
			t.Fatalf("Model((*model.Event)(nil)).Column(event_id).Scan(ctx, &ids): %v", err)
		}
		if len(ids) != 3 || ids[0] != streamed.EventID {
			t.Fatalf("read event ids %v", ids)
		}
		var at []*time.Time
		if err := db.NewSelect().Model((*model.Event)(nil)).Column("published_at").Order("id").Scan(ctx, &at); err != nil {
			t.Fatalf("Model((*model.Event)(nil)).Column(published_at).Scan(ctx, &times): %v", err)
		}
		// bun scans NULL into a zero time here, not a nil pointer (its scan of a *time.Time element).
		if len(at) != 3 || at[0] != nil && !at[0].IsZero() || at[2] == nil || !at[2].Equal(publishedTime) {
			t.Fatalf("read published_at %v", at)
		}
	})
	t.Run("Count and Exists", func(t *testing.T) {
		n, err := db.NewSelect().Model((*model.Event)(nil)).Count(ctx)
		if err != nil || n != 3 {
			t.Fatalf("Count: %d, %v; want 3", n, err)
		}
		ok, err := db.NewSelect().Model((*model.Event)(nil)).Where("id = ?", streamed.ID).Exists(ctx)
		if err != nil || !ok {
			t.Fatalf("Exists: %v, %v; want true", ok, err)
		}
	})
	t.Run("ScanAndCount", func(t *testing.T) {
		var got []model.Event
		n, err := db.NewSelect().Model(&got).Order("id").ScanAndCount(ctx)
		if err != nil || n != 3 {
			t.Fatalf("ScanAndCount: %d, %v; want 3", n, err)
		}
		checkRead(t, got, all...)
		got = nil // with a limit: the scan and the count run side by side
		n, err = db.NewSelect().Model(&got).Order("id").Limit(2).ScanAndCount(ctx)
		if err != nil || n != 3 {
			t.Fatalf("ScanAndCount with Limit(2): %d, %v; want 3", n, err)
		}
		checkRead(t, got, streamed, pending)
		got = nil // in a transaction: one after the other
		err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			n, err = tx.NewSelect().Model(&got).Order("id").Offset(1).ScanAndCount(ctx)
			return err
		})
		if err != nil || n != 3 {
			t.Fatalf("ScanAndCount with Offset(1) in a transaction: %d, %v; want 3", n, err)
		}
		checkRead(t, got, pending, published)
	})
	t.Run("the query scanned twice", func(t *testing.T) {
		var got []model.Event
		q := db.NewSelect().Model(&got).Order("id")
		for i := range 2 {
			got = got[:0]
			if err := q.Scan(ctx); err != nil {
				t.Fatalf("scan %d: %v", i, err)
			}
			checkRead(t, got, all...)
		}
	})
}

// TestEventRawReadOfStreamedRow pins what the hooks cannot reach: a raw query reads published_at as the
// table holds it, and a streamed row's 'infinity' fails the scan unless the query lists its columns and
// reads published_at with nullif (SELECT * cannot leave a column out).
func TestEventRawReadOfStreamedRow(t *testing.T) {
	db, streamed, _, _ := streamRows(t)
	ctx := context.Background()
	var got []model.Event
	if err := db.NewRaw("SELECT * FROM outbox_events WHERE id = ?", streamed.ID).Scan(ctx, &got); err == nil {
		t.Fatalf("NewRaw(SELECT *) of a streamed row read PublishedAt %v: want the driver's error", got[0].PublishedAt)
	}
	got = nil
	if err := db.NewRaw("SELECT id, event_id, nullif(published_at, 'infinity') AS published_at FROM outbox_events WHERE id = ?",
		streamed.ID).Scan(ctx, &got); err != nil {
		t.Fatalf("NewRaw with nullif: %v", err)
	}
	checkRead(t, got, streamed)
}

// TestEventInsertWhileStreaming inserts events with bun's NewInsert while the stream is on: the rows are
// streamed rows (published_at 'infinity', the column's default) and the insert reads back what bun
// returns without failing on it.
func TestEventInsertWhileStreaming(t *testing.T) {
	db, _, _, _ := streamRows(t)
	ctx := context.Background()
	newEvent := func() *model.Event {
		ev, err := model.NewEvent("stream.insert", map[string]string{"k": "v"})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	streamedRow := func(t *testing.T, ev *model.Event) {
		t.Helper()
		if ev.ID == 0 || ev.CreatedAt.IsZero() {
			t.Fatalf("insert did not read back id and created_at: id %d, created_at %v", ev.ID, ev.CreatedAt)
		}
		if ev.PublishedAt != nil {
			t.Fatalf("PublishedAt %v after the insert, want nil", ev.PublishedAt)
		}
		if n := outboxtest.Count(t, db, "outbox_events", "id = ? AND published_at = 'infinity' AND xid IS NOT NULL", ev.ID); n != 1 {
			t.Fatalf("row %d is not a streamed row", ev.ID)
		}
	}

	t.Run("one", func(t *testing.T) {
		ev := newEvent()
		if _, err := db.NewInsert().Model(ev).Exec(ctx); err != nil {
			t.Fatalf("NewInsert().Model(ev).Exec: %v", err)
		}
		streamedRow(t, ev)
	})
	t.Run("slice", func(t *testing.T) {
		evs := []model.Event{*newEvent(), *newEvent()}
		if _, err := db.NewInsert().Model(&evs).Exec(ctx); err != nil {
			t.Fatalf("NewInsert().Model(&[]model.Event).Exec: %v", err)
		}
		streamedRow(t, &evs[0])
		streamedRow(t, &evs[1])
	})
	t.Run("pointer slice in a transaction", func(t *testing.T) {
		evs := []*model.Event{newEvent(), newEvent()}
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.NewInsert().Model(&evs).Exec(ctx)
			return err
		})
		if err != nil {
			t.Fatalf("tx.NewInsert().Model(&[]*model.Event).Exec: %v", err)
		}
		streamedRow(t, evs[0])
		streamedRow(t, evs[1])
	})
	t.Run("the caller's column list and Returning", func(t *testing.T) {
		ev := newEvent()
		var id int64
		err := db.NewInsert().Model(ev).Column("event_id", "event_name", "queue", "payload", "metadata").
			Returning("id").Scan(ctx, &id)
		if err != nil {
			t.Fatalf("NewInsert().Column(...).Returning(id).Scan: %v", err)
		}
		if n := outboxtest.Count(t, db, "outbox_events", "id = ? AND published_at = 'infinity'", id); n != 1 {
			t.Fatalf("row %d is not a streamed row", id)
		}
		ev = newEvent()
		if _, err := db.NewInsert().Model(ev).ExcludeColumn("published_at").Exec(ctx); err != nil {
			t.Fatalf("NewInsert().ExcludeColumn(published_at).Exec: %v", err)
		}
		streamedRow(t, ev)
	})
	t.Run("PublishedAt set", func(t *testing.T) {
		// An event imported as published keeps its time: the hook leaves the column in.
		ev := newEvent()
		at := publishedTime
		ev.PublishedAt = &at
		if _, err := db.NewInsert().Model(ev).Exec(ctx); err != nil {
			t.Fatalf("NewInsert of a published event: %v", err)
		}
		if n := outboxtest.Count(t, db, "outbox_events", "id = ? AND published_at = ?", ev.ID, publishedTime); n != 1 {
			t.Fatalf("row %d lost its published_at", ev.ID)
		}
	})
	t.Run("a Value for published_at", func(t *testing.T) {
		ev := newEvent()
		if _, err := db.NewInsert().Model(ev).Value("published_at", "NULL").Exec(ctx); err != nil {
			t.Fatalf("NewInsert().Value(published_at, NULL).Exec: %v", err)
		}
		if n := outboxtest.Count(t, db, "outbox_events", "id = ? AND published_at IS NULL", ev.ID); n != 1 {
			t.Fatalf("row %d lost the Value of its published_at", ev.ID)
		}
	})
	t.Run("read back", func(t *testing.T) {
		var got []model.Event
		if err := db.NewSelect().Model(&got).Where("event_name = 'stream.insert'").Scan(ctx); err != nil {
			t.Fatalf("reading the inserted events: %v", err)
		}
		if len(got) != 9 {
			t.Fatalf("read %d inserted events, want 9", len(got))
		}
	})
}
