package fanout_test

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/fanout"
)

// The worker registers one handler per listener of the routes the relay runs with; each listener's
// task has a type of its own.
func ExampleRoutes_Handle() {
	routes := fanout.Routes{"order.placed": {"send-confirmation", "reserve-stock"}}
	mux := asynq.NewServeMux()
	for _, l := range routes.Listeners("order.placed") {
		routes.Handle(mux, "order.placed", l, asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return nil
		}))
		fmt.Println(fanout.ListenerTaskType("order.placed", l))
	}
	fmt.Println(fanout.Routes{"order.placed": {"mail", "mail"}}.Validate())
	// Output:
	// order.placed:send-confirmation
	// order.placed:reserve-stock
	// Routes["order.placed"]: listener "mail" is listed twice
}
