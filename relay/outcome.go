package relay

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
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

// outcome is what became of one row a round read and tried to deliver, whichever way it was read (a
// per-row claim, a fair-queue lane, a stream batch). Each row's enqueue error is classified once, by
// classify; the rounds write and report by the outcome, and charge is the one place a failed enqueue is
// charged to its row.
type outcome uint8

const (
	delivered  outcome = iota // the task reached Redis (a TaskID conflict means it already had)
	released                  // not tried: the relay is stopping (errReleased), or the decode waited past the stop
	handedOver                // a keyed row of the stream, given to the exception queue unsent (errHandOver)
	cancelled                 // a row the stream read cancelled: never enqueued (errCancelled)
	charged                   // the task's own failure (taskOwn): an attempt charged, dead after the last one
	outage                    // any other failure: no row is blamed for it, and the round backs off
)

// classify returns the outcome of a row whose enqueue returned err (nil: delivered).
func classify(err error) outcome {
	switch {
	case err == nil:
		return delivered
	case errors.Is(err, errReleased):
		return released
	case errors.Is(err, errHandOver):
		return handedOver
	case errors.Is(err, errCancelled):
		return cancelled
	case taskOwn(err):
		return charged
	}
	return outage
}

// charge is a row charged for a failed enqueue: its index in the round's batch, the error, and what is
// written on the row.
type charge struct {
	i   int
	err error
	store.Charge
}

// chargeRow applies the retry policy to ev, whose enqueue failed with err, the task's own failure: the
// attempt is charged and the row retried after Config.RetryBackoff's delay or, after Config.MaxAttempts
// attempts or when the row can never become a task (errMalformedRow), dead.
func chargeRow(cfg *Config, i int, ev *model.Event, err error) charge {
	n := ev.Attempts + 1
	c := charge{i: i, err: err, Charge: store.Charge{ID: ev.ID, Attempts: n, Err: truncate(err.Error(), 2000)}}
	c.Dead = n >= cfg.MaxAttempts || errors.Is(err, errMalformedRow)
	if !c.Dead {
		c.Delay = cfg.retryDelay(n)
	}
	return c
}

// tally is the outcomes of the rows of one batch, each classified once.
type tally struct {
	delivered int
	released  []int // by index: not tried
	handOver  []int // keyed rows of the stream
	cancels   []int // cancelled rows of the stream whose cancel is not settled yet
	charges   []charge
	outages   []int // rows not charged for an outage
	outage    error // the first outage's error
}

// tallyBatch classifies the outcome of each of events by errs (see classify), charging the task's own
// failures (chargeRow). unsettled tells a cancelled row whose cancel is still to settle.
func tallyBatch(cfg *Config, events []model.Event, errs []error, unsettled map[int]bool) tally {
	var t tally
	for i, err := range errs {
		switch classify(err) {
		case delivered:
			t.delivered++
		case released:
			t.released = append(t.released, i)
		case handedOver:
			t.handOver = append(t.handOver, i)
		case cancelled:
			if unsettled[i] {
				t.cancels = append(t.cancels, i)
			}
		case charged:
			t.charges = append(t.charges, chargeRow(cfg, i, &events[i], err))
		case outage:
			t.outages = append(t.outages, i)
			if t.outage == nil {
				t.outage = err
			}
		}
	}
	return t
}

// failOutage fails the round of res when rows of t met an outage: none of them is charged, they count as
// released, and the relay backs off.
func (t *tally) failOutage(res *BatchEvent) {
	if t.outage == nil {
		return
	}
	res.Released += len(t.outages)
	err := fmt.Errorf("enqueue: %d rows released, none charged: %w", len(t.outages), t.outage)
	if res.Err != nil {
		err = errors.Join(res.Err, err)
	}
	res.Err = err
}

// outageOnly returns the outage of a batch's enqueues when Redis took none of its rows and none failed for
// a reason of its own, nil otherwise.
func outageOnly(errs []error) error {
	var first error
	for _, err := range errs {
		switch classify(err) {
		case delivered, charged:
			return nil
		case outage:
			first = cmpErr(first, err)
		}
	}
	return first
}

// anyOutage reports whether an enqueue of errs met an outage.
func anyOutage(errs []error) bool {
	for _, err := range errs {
		if classify(err) == outage {
			return true
		}
	}
	return false
}

// storeCharges is what the charges write on their rows.
func storeCharges(cs []charge) []store.Charge {
	if len(cs) == 0 {
		return nil
	}
	out := make([]store.Charge, len(cs))
	for i, c := range cs {
		out[i] = c.Charge
	}
	return out
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	// PostgreSQL text takes neither NUL nor invalid UTF-8 (a cut may split a rune).
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "")
}
