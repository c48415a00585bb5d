package relay

import (
	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/model"
)

// appendDeliveryOptions appends the asynq options of ev's delivery options (model.WithProcessAt, ...),
// one for each that is set; unset ones leave asynq's defaults. ProcessAt maps to asynq.ProcessAt with the
// absolute time kept in the row: asynq schedules a task whose time is ahead and makes one whose time
// has passed pending (or aggregating, with a group) at once.
func appendDeliveryOptions(opts []asynq.Option, ev *model.Event) []asynq.Option {
	if ev.ProcessAt != nil {
		opts = append(opts, asynq.ProcessAt(*ev.ProcessAt))
	}
	if ev.MaxRetry != nil {
		opts = append(opts, asynq.MaxRetry(*ev.MaxRetry))
	}
	if ev.Timeout > 0 {
		opts = append(opts, asynq.Timeout(ev.Timeout))
	}
	if ev.Deadline != nil {
		opts = append(opts, asynq.Deadline(*ev.Deadline))
	}
	if ev.Group != "" {
		opts = append(opts, asynq.Group(ev.Group))
	}
	return opts
}

// listenerGroup is the asynq group of a listener's task when the event has a group: "<group>:<listener>",
// so that asynq aggregates each listener's tasks apart, as their task types ("<event>:<listener>") are.
func listenerGroup(group, listener string) string { return group + ":" + listener }
