package relay

import (
	"context"
	"sync/atomic"
	"time"
)

// Observer are optional callbacks; each runs synchronously on the relay's goroutine, so keep them quick.
// Their event structs may grow fields.
type Observer struct {
	// OnBatch is called after every round that claimed rows or failed.
	OnBatch func(ctx context.Context, ev BatchEvent)
	// OnDead is called for every row the relay marks dead.
	OnDead func(ctx context.Context, ev DeadEvent)
	// OnEnqueue is called after every enqueue of a row, successful or not, from the goroutine that made
	// it: calls for the rows of a round run concurrently. A row that reached Redis may still be released
	// when its round fails to commit the mark; it is then enqueued again later (a TaskID conflict) and
	// reported again.
	OnEnqueue func(ctx context.Context, ev EnqueueEvent)
}

// EnqueueEvent describes one enqueue of a row into asynq (with Routes, of all its listeners' tasks).
type EnqueueEvent struct {
	ID        int64
	EventID   string
	EventName string
	Queue     string
	// CreatedAt is the row's created_at: the start of the transaction that wrote it, on PostgreSQL's clock.
	CreatedAt time.Time
	// Duration is how long the enqueue took (with Routes, the enqueues of all its listeners).
	Duration time.Duration
	// Err is why the enqueue failed; nil when the task reached Redis or was already there.
	Err error
}

// BatchEvent describes one round: a claim, its enqueues and its marks.
type BatchEvent struct {
	// Claimed is the number of rows the round locked.
	Claimed int
	// Published is the number of rows that reached Redis (or were already there) and were marked.
	Published int
	// Failed is the number of rows whose enqueue failed and that were scheduled for a retry or marked dead.
	Failed int
	// Dead is the number of the failed rows that reached MaxAttempts.
	Dead int
	// Released is the number of claimed rows left untouched (shutdown, or a Redis outage) for a later round.
	Released int
	// Duration is how long the round took.
	Duration time.Duration
	// Err is why the round failed, nil when it succeeded. A failed round may still have published rows.
	Err error

	full bool // the claim took as many rows as BatchSize or BatchBytes allowed: more may be waiting
	// streamed: the iteration ran a stream round (runRounds); after one that delivered rows and was not
	// full, the loop waits MinPollInterval rather than none (Relay.loop).
	streamed bool
	// streamBusy: the stream is on and the iteration's stream round found every lane due held by other
	// rounds (streamRound): an empty iteration then says nothing of whether an outage is over.
	streamBusy bool
}

// DeadEvent describes a row the relay gave up on.
type DeadEvent struct {
	ID        int64
	EventID   string
	EventName string
	Attempts  int
	Err       error
}

// Stats are the relay's counters since New; read them with Relay.Stats.
type Stats struct {
	Rounds       int64 // rounds that claimed rows or failed
	FailedRounds int64 // rounds that failed
	Published    int64 // rows marked published
	Failed       int64 // failed enqueues of single rows
	Dead         int64 // rows marked dead (keyed rows too, whose task asynq archived)
	Cleaned      int64 // published rows deleted after PublishedRetention
	Completed    int64 // keyed rows whose tasks this relay saw completed, releasing the next event of the key
}

type counters struct {
	rounds, failedRounds, published, failed, dead, cleaned, completed atomic.Int64
}

// Stats returns the relay's counters since New. It is safe to call at any time.
func (r *Relay) Stats() Stats {
	c := &r.counters
	return Stats{
		Rounds:       c.rounds.Load(),
		FailedRounds: c.failedRounds.Load(),
		Published:    c.published.Load(),
		Failed:       c.failed.Load(),
		Dead:         c.dead.Load(),
		Cleaned:      c.cleaned.Load(),
		Completed:    c.completed.Load(),
	}
}
