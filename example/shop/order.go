package shop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/model"
)

// EventOrderPlaced is the name of the event an inserted order emits, and the asynq task type.
const EventOrderPlaced = "order.placed"

// Order is a placed order. Embedding bunx.Hooks makes every insert of an Order record the events that
// Register bound to the database, in the insert's own transaction.
type Order struct {
	bun.BaseModel `bun:"table:orders"`
	bunx.Hooks    `bun:"-"`

	ID         int64        `bun:",pk,autoincrement" json:"id"`
	Customer   string       `bun:",notnull" json:"customer"`
	TotalCents int64        `bun:",notnull" json:"total_cents"`
	CreatedAt  time.Time    `bun:",nullzero,notnull,default:current_timestamp" json:"created_at"`
	Lines      []*OrderLine `bun:"rel:has-many,join:id=order_id" json:"lines"`
}

// OrderLine is one line of an order.
type OrderLine struct {
	bun.BaseModel `bun:"table:order_lines"`

	ID         int64  `bun:",pk,autoincrement" json:"id"`
	OrderID    int64  `bun:",notnull" json:"order_id"`
	SKU        string `bun:"sku,notnull" json:"sku"`
	Quantity   int    `bun:",notnull" json:"quantity"`
	PriceCents int64  `bun:",notnull" json:"price_cents"`
}

// OrderPlaced is the payload of the order.placed event.
type OrderPlaced struct {
	OrderID    int64  `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
	LineCount  int    `json:"line_count"`
}

// PlaceOrderRequest is what a customer sends to place an order.
type PlaceOrderRequest struct {
	Customer string        `json:"customer"`
	Lines    []LineRequest `json:"lines"`
}

// LineRequest is one line of a PlaceOrderRequest.
type LineRequest struct {
	SKU        string `json:"sku"`
	Quantity   int    `json:"quantity"`
	PriceCents int64  `json:"price_cents"`
}

// ErrInvalidOrder is wrapped by the errors of a request that cannot become an order; the message names
// the field.
var ErrInvalidOrder = errors.New("shop: invalid order")

// Validate checks the request and names the first field that is wrong.
func (r PlaceOrderRequest) Validate() error {
	if strings.TrimSpace(r.Customer) == "" {
		return fmt.Errorf("%w: customer is empty", ErrInvalidOrder)
	}
	if len(r.Lines) == 0 {
		return fmt.Errorf("%w: lines is empty", ErrInvalidOrder)
	}
	if len(r.Lines) > 100 {
		return fmt.Errorf("%w: more than 100 lines", ErrInvalidOrder)
	}
	for i, l := range r.Lines {
		switch {
		case strings.TrimSpace(l.SKU) == "":
			return fmt.Errorf("%w: lines[%d].sku is empty", ErrInvalidOrder, i)
		case l.Quantity < 1 || l.Quantity > 1000:
			return fmt.Errorf("%w: lines[%d].quantity must be between 1 and 1000", ErrInvalidOrder, i)
		case l.PriceCents < 0 || l.PriceCents > 100_000_000:
			return fmt.Errorf("%w: lines[%d].price_cents must be between 0 and 100000000", ErrInvalidOrder, i)
		}
	}
	return nil
}

// Register binds the shop's events to db: from now on every insert of an Order through db, or through a
// transaction of db, writes an order.placed event for the asynq queue in that insert's transaction.
// Call it once at startup, before db is shared between goroutines (see bunx.New).
func Register(db *bun.DB, queue string) *bunx.Outbox {
	ob := bunx.New(db)
	bunx.OnInsert(ob, func(_ context.Context, o *Order) ([]*model.Event, error) {
		ev, err := model.NewEvent(EventOrderPlaced, OrderPlaced{
			OrderID:    o.ID,
			Customer:   o.Customer,
			TotalCents: o.TotalCents,
			LineCount:  len(o.Lines),
		}, model.WithQueue(queueOrDefault(queue)))
		if err != nil {
			return nil, err
		}
		return []*model.Event{ev}, nil
	})
	return ob
}

func queueOrDefault(q string) string {
	if q == "" {
		return "default"
	}
	return q
}

// PlaceOrder validates req and inserts the order and its lines in one transaction. The order's insert
// hook writes order.placed in that transaction, so the event exists if and only if the order does.
func PlaceOrder(ctx context.Context, db bun.IDB, req PlaceOrderRequest) (*Order, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var order *Order
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		order, err = InsertOrder(ctx, tx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return order, nil
}

// InsertOrder inserts the order and its lines with db, without a transaction of its own: pass the bun.Tx
// that the order must commit or roll back with. PlaceOrder is InsertOrder in db.RunInTx.
func InsertOrder(ctx context.Context, db bun.IDB, req PlaceOrderRequest) (*Order, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	order := &Order{Customer: req.Customer}
	for _, l := range req.Lines {
		order.Lines = append(order.Lines, &OrderLine{SKU: l.SKU, Quantity: l.Quantity, PriceCents: l.PriceCents})
		order.TotalCents += int64(l.Quantity) * l.PriceCents
	}
	if _, err := db.NewInsert().Model(order).Returning("id, created_at").Exec(ctx); err != nil {
		return nil, fmt.Errorf("insert order: %w", err)
	}
	for _, l := range order.Lines {
		l.OrderID = order.ID
	}
	if _, err := db.NewInsert().Model(&order.Lines).Returning("id").Exec(ctx); err != nil {
		return nil, fmt.Errorf("insert order lines: %w", err)
	}
	return order, nil
}
