package model

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxGroupLength is the longest asynq group name, in bytes.
const maxGroupLength = 255

// delivery holds the delivery options given to NewEvent, and the first invalid one.
type delivery struct {
	processAt *time.Time
	maxRetry  *int
	timeout   time.Duration
	deadline  *time.Time
	group     string
	retention time.Duration
	err       error // the first option refused, named
}

// refuse records the first invalid option: NewEvent returns it, wrapping ErrInvalidEvent.
func (d *delivery) refuse(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

// WithProcessAt makes the task wait in asynq's scheduled set until t; asynq hands it to a handler once t
// has passed. The relay enqueues the event at once, as any other: a t already in the past when the relay
// enqueues it (or when the event is built) makes a pending task. A zero t is refused. When both
// WithProcessAt and WithProcessIn are given, the last one wins, as in asynq.
func WithProcessAt(t time.Time) Option {
	return func(o *options) {
		if t.IsZero() {
			o.delivery.refuse("WithProcessAt: the time must not be zero")
			return
		}
		o.delivery.processAt = &t
	}
}

// WithProcessIn is WithProcessAt(time.Now().Add(d)), taken when NewEvent builds the event: the row stores
// the absolute time, so a relay that enqueues the event later, or again after Redis lost it, keeps the
// original schedule. A negative d is refused; 0 means "now".
func WithProcessIn(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.delivery.refuse("WithProcessIn(%s): the delay must not be negative", d)
			return
		}
		t := time.Now().Add(d)
		o.delivery.processAt = &t
	}
}

// WithMaxRetry sets how many times asynq retries the task after its handler fails; 0 means never.
// Defaults to asynq's default (25). A negative n is refused.
func WithMaxRetry(n int) Option {
	return func(o *options) {
		if n < 0 {
			o.delivery.refuse("WithMaxRetry(%d): the retry count must not be negative", n)
			return
		}
		o.delivery.maxRetry = &n
	}
}

// WithTimeout sets how long one run of the task's handler may take before its context is cancelled and
// the run counts as failed. Defaults to asynq's default (30 minutes, unless WithDeadline is given; with
// both, the earlier one applies). asynq keeps whole seconds, so d is truncated to them; a d below one
// second is refused.
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d < time.Second {
			o.delivery.refuse("WithTimeout(%s): the timeout must be at least 1s (asynq keeps whole seconds)", d)
			return
		}
		o.delivery.timeout = d
	}
}

// WithDeadline sets when the handler's context expires, on every run of the task: a run after t fails at
// once, and asynq retries it until MaxRetry is spent. A zero t, or one that has already passed when the
// event is built, is refused, as is a deadline before the time given by WithProcessAt/WithProcessIn.
// asynq keeps whole seconds.
func WithDeadline(t time.Time) Option {
	return func(o *options) {
		switch {
		case t.IsZero():
			o.delivery.refuse("WithDeadline: the time must not be zero")
			return
		case !t.After(time.Now()):
			o.delivery.refuse("WithDeadline(%s): the deadline has already passed", t.Format(time.RFC3339))
			return
		}
		o.delivery.deadline = &t
	}
}

// WithGroup puts the task in the named asynq group: asynq aggregates the tasks of one group and queue
// into one task for the handler, following the worker's GroupAggregator and GroupGracePeriod,
// GroupMaxDelay and GroupMaxSize settings. A worker without a GroupAggregator never runs grouped tasks.
// The group name follows the rules of queue names (not empty, at most 255 bytes, no spaces or
// control characters).
//
// asynq deletes the grouped tasks once it has aggregated them, so their TaskID no longer deduplicates
// after that, and the relay's reconciler does not check grouped events (it cannot tell an aggregated
// task from a lost one).
func WithGroup(name string) Option {
	return func(o *options) {
		if problem := groupProblem(name); problem != "" {
			o.delivery.refuse("WithGroup(%.40q): the group name %s", name, problem)
			return
		}
		o.delivery.group = name
	}
}

// WithTaskRetention keeps the task in Redis, once completed, for at least d (asynq's Retention, the
// event's dedupe window; Event.TaskRetention): longer than the relay's
// Config.TaskRetention when d is longer (the larger of the two applies, so the relay's dedupe window and
// the reconciler's view never shrink). asynq keeps whole seconds; a d below one second is refused.
func WithTaskRetention(d time.Duration) Option {
	return func(o *options) {
		if d < time.Second {
			o.delivery.refuse("WithTaskRetention(%s): the retention must be at least 1s (asynq keeps whole seconds)", d)
			return
		}
		o.delivery.retention = d
	}
}

// apply copies the delivery options onto ev.
func (d *delivery) apply(ev *Event) {
	ev.ProcessAt = d.processAt
	ev.MaxRetry = d.maxRetry
	ev.Timeout = d.timeout
	ev.Deadline = d.deadline
	ev.Group = d.group
	ev.TaskRetention = d.retention
}

// validateDelivery checks the delivery fields of an event however it was built, naming the field.
func (e *Event) validateDelivery() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidEvent, e.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case e.ProcessAt != nil && e.ProcessAt.IsZero():
		return bad("ProcessAt must not be the zero time (use nil for none)")
	case e.MaxRetry != nil && *e.MaxRetry < 0:
		return bad("MaxRetry must not be negative, got %d", *e.MaxRetry)
	case e.Timeout != 0 && e.Timeout < time.Second:
		return bad("Timeout must be 0 (asynq's default) or at least 1s, got %s", e.Timeout)
	case e.Deadline != nil && e.Deadline.IsZero():
		return bad("Deadline must not be the zero time (use nil for none)")
	case e.Deadline != nil && e.ProcessAt != nil && !e.Deadline.After(*e.ProcessAt):
		return bad("Deadline %s is not after ProcessAt %s", e.Deadline.Format(time.RFC3339), e.ProcessAt.Format(time.RFC3339))
	case e.TaskRetention != 0 && e.TaskRetention < time.Second:
		return bad("TaskRetention must be 0 (the relay's) or at least 1s, got %s", e.TaskRetention)
	}
	if e.Group != "" {
		if problem := groupProblem(e.Group); problem != "" {
			return bad("Group %.40q %s", e.Group, problem)
		}
	}
	return nil
}

// groupProblem says what is wrong with an asynq group name, "" when nothing is.
func groupProblem(s string) string {
	switch {
	case strings.TrimSpace(s) == "":
		return "must not be empty or blank"
	case len(s) > maxGroupLength:
		return fmt.Sprintf("is %d bytes, over the limit of %d", len(s), maxGroupLength)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return "must not contain spaces or control characters"
	}
	return ""
}
