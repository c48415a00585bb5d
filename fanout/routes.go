package fanout

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/hibiken/asynq"
)

// Routes fans events out to listeners, in one place for the relay and the workers:
//
//	routes := fanout.Routes{"order.placed": {"send-confirmation", "reserve-stock"}}
//
//	r, err := relay.New(db, redisOpt, relay.Config{Routes: routes})   // the relay enqueues one task per listener
//
//	mux := asynq.NewServeMux()                                         // the worker handles each listener's task
//	routes.Handle(mux, "order.placed", "send-confirmation", inbox.Handler("send-confirmation", sendConfirmation))
//	routes.Handle(mux, "order.placed", "reserve-stock", inbox.Handler("reserve-stock", reserveStock))
//
// For an event name with listeners the relay enqueues, instead of one task, one task per listener: task
// type ListenerTaskType(event, listener), TaskID "<event id>:<listener>", the header bunbox-listener, and
// otherwise the same payload, headers, queue and delivery options (an event's group becomes
// "<group>:<listener>", so that each listener's tasks are aggregated apart). Each listener's task retries on its own, so a failing
// listener never makes another run twice. The row is marked published once every listener's task is in
// Redis. Events without listeners are enqueued as one task of type event name, as usual.
//
// Give each listener's inbox handler the listener's name, so that the inbox records each listener apart.
type Routes map[string][]string

// ListenerTaskType is the asynq task type of event's task for listener: "event:listener".
func ListenerTaskType(event, listener string) string { return event + ":" + listener }

// Handle registers h on mux for event's task for listener. It panics when the route is not declared in
// r, so that a worker cannot listen for tasks the relay never enqueues.
func (r Routes) Handle(mux *asynq.ServeMux, event, listener string, h asynq.Handler) {
	for _, l := range r[event] {
		if l == listener {
			mux.Handle(ListenerTaskType(event, listener), h)
			return
		}
	}
	panic(fmt.Sprintf("fanout.Routes.Handle: no route from %q to listener %q: add it to the Routes the relay runs with", event, listener))
}

// Listeners returns the listeners of event, nil when it has none.
func (r Routes) Listeners(event string) []string { return r[event] }

// Validate reports the first listener name that is empty, holds spaces or control characters, or is
// listed twice for one event; relay.New and relay.NewReconciler call it.
func (r Routes) Validate() error {
	events := make([]string, 0, len(r))
	for ev := range r {
		events = append(events, ev)
	}
	sort.Strings(events)
	for _, ev := range events {
		seen := map[string]bool{}
		for _, l := range r[ev] {
			switch {
			case l == "" || strings.IndexFunc(l, func(c rune) bool { return unicode.IsSpace(c) || !unicode.IsPrint(c) }) >= 0:
				return fmt.Errorf("Routes[%q]: listener name %q must be non-empty, without spaces or control characters", ev, l)
			case seen[l]:
				return fmt.Errorf("Routes[%q]: listener %q is listed twice", ev, l)
			}
			seen[l] = true
		}
	}
	return nil
}
