package bunx_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/model"
)

// TestInsertKeepsValuesVerbatim writes values that SQL literals and bun's placeholders could mangle (quotes,
// backslashes, ?, ?name with a named argument on the db, non-ASCII) through Record and through a
// hook, and reads them back unchanged.
func TestInsertKeepsValuesVerbatim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	db := b.db.WithNamedArg("name", "INJECTED")
	payload := json.RawMessage(`{"q":"it's ? and ?name and ?0","bs":"a\\b\\'c","u":"héllo ✓","n":[1,2.5,null,true]}`)
	meta := map[string]string{"k'ey": "v?al ?name \\", "traceparent-like": "00-ab-cd-01"}

	ev, err := model.NewEvent("odd.values", payload, model.WithMetadata("k'ey", meta["k'ey"]),
		model.WithMetadata("traceparent-like", meta["traceparent-like"]), model.WithQueue("q?name"))
	require.NoError(t, err)
	require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return b.ob.Record(ctx, tx, ev)
	}))
	require.NotZero(t, ev.ID, "Record reads the id back")
	require.False(t, ev.CreatedAt.IsZero(), "Record reads created_at back")

	ob := bunx.New(db)
	bunx.OnInsert(ob, func(_ context.Context, o *Item) ([]*model.Event, error) {
		ev, err := model.NewEvent("item.added", payload, model.WithMetadata("k'ey", meta["k'ey"]),
			model.WithMetadata("traceparent-like", meta["traceparent-like"]))
		return []*model.Event{ev}, err
	})
	_, err = db.NewCreateTable().Model((*Item)(nil)).Exec(ctx)
	require.NoError(t, err)
	require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&Item{SKU: "a?name"}).Exec(ctx)
		return err
	}))

	evs := b.events(t)
	require.Len(t, evs, 2)
	for _, got := range evs {
		require.JSONEq(t, string(payload), string(got.Payload), got.Name)
		require.Equal(t, meta, got.Metadata, got.Name)
	}
	require.Equal(t, "q?name", evs[0].Queue)
	require.Equal(t, ev.EventID, evs[0].EventID)
	require.Equal(t, ev.ID, evs[0].ID)
	require.Equal(t, model.DefaultQueue, evs[1].Queue)
}

// TestRecordManyReadsBackEachID records several events in one statement; each gets its own row's id.
func TestRecordManyReadsBackEachID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var evs []*model.Event
	for i := range 5 {
		ev, err := model.NewEvent("many", map[string]int{"i": i})
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	require.NoError(t, b.ob.Record(ctx, b.db, evs...))
	rows := b.events(t)
	require.Len(t, rows, 5)
	for i, row := range rows {
		require.Equal(t, evs[i].EventID, row.EventID)
		require.Equal(t, row.ID, evs[i].ID)
		require.Equal(t, map[string]string{}, nonNil(row.Metadata), "no metadata is the empty object")
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// Item is a second hooked model, for an Outbox bound to a clone of the db.
type Item struct {
	bun.BaseModel `bun:"table:items"`
	bunx.Hooks    `bun:"-"`

	ID  int64  `bun:",pk,autoincrement"`
	SKU string `bun:"sku,notnull"`
}
