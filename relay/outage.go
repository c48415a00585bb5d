package relay

import (
	"errors"
	"strings"
)

// ErrTaskRejected marks an enqueue error that is the task's own fault: the row is charged an attempt and,
// after Config.MaxAttempts, marked dead. An Enqueuer of your own (Config.Enqueuer) wraps it in the errors
// of a task that can never be enqueued as it is (fmt.Errorf("%w: ...", relay.ErrTaskRejected)).
//
// Every other enqueue error is an outage, whatever it says (Redis unreachable, loading, read-only, failing
// over, refusing the relay's user or password, out of clients, an ACL without EVALSHA, a timeout): the
// round fails and backs off, its failed rows are released without a charge, and nothing dies of it.
var ErrTaskRejected = errors.New("relay: the task was rejected")

// asynqTaskErrors are the texts of the errors asynq v0.26's Client returns, before it talks to Redis, for a
// task or an option it refuses (client.go: EnqueueContext and composeOptions). asynq exports no sentinel
// for them; TestTaskOwnErrorsOfAsynq fails if a new asynq words them differently.
var asynqTaskErrors = []string{
	"task cannot be nil",
	"task typename cannot be empty",
	"queue name must contain one or more characters",
	"task ID cannot be empty",
	"Unique TTL cannot be less than 1s",
	"group key cannot be empty",
}

// asynqEncodeError starts the error asynq returns for a task message it cannot encode.
const asynqEncodeError = "cannot encode message: "

// taskOwn reports whether the enqueue error err is the task's own: a malformed row, an error wrapping
// ErrTaskRejected, or one of the few refusals of asynq's Client for the task itself. A TaskID conflict is
// not an error (the task is delivered). Everything else is an outage, never charged to the row.
func taskOwn(err error) bool {
	if errors.Is(err, errMalformedRow) || errors.Is(err, ErrTaskRejected) {
		return true
	}
	// asynq returns its refusals as they are, or in its own error type for an encoding failure: the text
	// is the whole message of one error in the chain, never a part of a Redis reply.
	for e := err; e != nil; e = errors.Unwrap(e) {
		msg := e.Error()
		for _, s := range asynqTaskErrors {
			if msg == s {
				return true
			}
		}
		if strings.HasPrefix(msg, asynqEncodeError) {
			return true
		}
	}
	return false
}
