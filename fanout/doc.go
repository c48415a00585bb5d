// Package fanout declares which listeners receive each event: one Routes value, given to the relay
// (relay.Config.Routes), which enqueues one asynq task per listener, and to the workers, which register
// each listener's handler with Routes.Handle. A worker imports fanout, not the relay.
//
//	routes := fanout.Routes{"order.placed": {"send-confirmation", "reserve-stock"}}
//	routes.Handle(mux, "order.placed", "send-confirmation", inbox.Handler("send-confirmation", send))
package fanout
