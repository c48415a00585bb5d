package bunx_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
)

// Order is a business model that emits events through the embedded hooks.
type Order struct {
	bun.BaseModel `bun:"table:orders"`
	bunx.Hooks    `bun:"-"`

	ID     int64  `bun:",pk,autoincrement"`
	Ref    string `bun:",unique,notnull"`
	Status string `bun:",notnull,default:'new'"`
}

type orderEvent struct {
	ID  int64  `json:"id"`
	Ref string `json:"ref"`
}

type testBundle struct {
	db *bun.DB
	ob *bunx.Outbox
}

// setup gives a fresh schema with the outbox and an orders table, and an Outbox whose Order hooks emit
// order.placed, order.updated and order.deleted.
func setup(t *testing.T, opts ...bunx.Option) *testBundle {
	t.Helper()
	db, _ := outboxtest.Schema(t)
	_, err := db.NewCreateTable().Model((*Order)(nil)).Exec(context.Background())
	require.NoError(t, err)
	ob := bunx.New(db, opts...)
	registerOrderEvents(ob)
	return &testBundle{db: db, ob: ob}
}

// registerOrderEvents registers Order's order.placed, order.updated and order.deleted on ob.
func registerOrderEvents(ob *bunx.Outbox) {
	emit := func(name string) func(context.Context, *Order) ([]*model.Event, error) {
		return func(_ context.Context, o *Order) ([]*model.Event, error) {
			ev, err := model.NewEvent(name, orderEvent{ID: o.ID, Ref: o.Ref})
			return []*model.Event{ev}, err
		}
	}
	bunx.OnInsert(ob, emit("order.placed"))
	bunx.OnUpdate(ob, emit("order.updated"))
	bunx.OnDelete(ob, emit("order.deleted"))
}

func (b *testBundle) events(t *testing.T) []model.Event {
	t.Helper()
	var evs []model.Event
	require.NoError(t, b.db.NewSelect().Model(&evs).Order("id").Scan(context.Background()))
	return evs
}

func (b *testBundle) eventNames(t *testing.T) []string {
	t.Helper()
	names := []string{}
	for _, ev := range b.events(t) {
		names = append(names, ev.Name)
	}
	return names
}

func (b *testBundle) orders(t *testing.T) int64 {
	t.Helper()
	return outboxtest.Count(t, b.db, "orders", "")
}

// requireUnchanged asserts that a failed transaction left no order and no event behind.
func (b *testBundle) requireUnchanged(t *testing.T) {
	t.Helper()
	require.Zero(t, b.orders(t), "orders")
	require.Empty(t, b.events(t), "outbox events")
}

func payloadOf(t *testing.T, ev model.Event) orderEvent {
	t.Helper()
	var p orderEvent
	require.NoError(t, json.Unmarshal(ev.Payload, &p))
	return p
}
