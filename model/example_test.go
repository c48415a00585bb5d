package model_test

import (
	"fmt"

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
	// bunbox: invalid event "order.placed": Payload: json: unsupported type: chan int
}
