package model_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/model"
)

func ExampleNewEvent() {
	type OrderPlaced struct {
		OrderID int64 `json:"order_id"`
	}
	ev, err := model.NewEvent("order.placed", OrderPlaced{OrderID: 42},
		model.WithQueue("critical"),
		model.WithEventID(uuid.MustParse("0192f0a0-0000-7000-8000-000000000001")),
		model.WithMetadata("tenant", "acme"),
	)
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.Name, ev.Queue, ev.EventID)
	fmt.Println(string(ev.Payload), ev.Metadata)
	// Output:
	// order.placed critical 0192f0a0-0000-7000-8000-000000000001
	// {"order_id":42} map[tenant:acme]
}

func ExampleNewEvent_invalid() {
	_, err := model.NewEvent("order.placed", make(chan int))
	fmt.Println(err)
	// Output:
	// model: invalid event "order.placed": Payload: json: unsupported type: chan int
}

// Delivery options travel in the row; the relay maps each to asynq's option of the same name.
func ExampleWithProcessAt() {
	remindAt := time.Date(2100, 3, 1, 9, 0, 0, 0, time.UTC)
	ev, err := model.NewEvent("cart.remind", map[string]int{"cart_id": 7},
		model.WithProcessAt(remindAt), // waits in asynq's scheduled set until then
		model.WithMaxRetry(3),
		model.WithTimeout(30*time.Second),
		model.WithDeadline(remindAt.Add(time.Hour)),
		model.WithGroup("reminders"),
	)
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.ProcessAt.Format(time.RFC3339), *ev.MaxRetry, ev.Timeout, ev.Deadline.Format(time.RFC3339), ev.Group)
	// Output:
	// 2100-03-01T09:00:00Z 3 30s 2100-03-01T10:00:00Z reminders
}

// WithProcessIn stores the absolute time the delay ends, taken when the event is built.
func ExampleWithProcessIn() {
	before := time.Now()
	ev, err := model.NewEvent("cart.remind", nil, model.WithProcessIn(24*time.Hour))
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.ProcessAt.Sub(before).Round(time.Hour))
	// Output:
	// 24h0m0s
}

func ExampleWithMaxRetry_invalid() {
	_, err := model.NewEvent("cart.remind", nil, model.WithMaxRetry(-1))
	fmt.Println(err)
	fmt.Println(errors.Is(err, model.ErrInvalidEvent))
	// Output:
	// model: invalid event "cart.remind": WithMaxRetry(-1): the retry count must not be negative
	// true
}
