package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/maintenance/wakeup"
	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
)

// The relay's side of the snapshot cursor (EnableStream; the design in internal/streamsql): while the
// stream is on for the relay's outbox, every round of the loop and of the helpers runs a stream round
// (stream_round.go) besides its per-row round. A stream round works one lane (stream_lanes.go), whose
// cursor row it locks: relays and workers stream different lanes at once. The per-row rounds deliver the
// rows the stream handed over, keyed rows, retries and the rows written while the stream was off.

// Under steady traffic a worker that streams waits MinPollInterval after a round that delivered rows and
// was not full (Relay.loop), instead of starting the next round at once: back to back, each round carried
// what committed during the one before, and its fixed statements (begin, bounds, cursor lock, snapshot,
// cursor update, commit, the check for per-row rows) were paid for a few rows each. At 5,000 events/s
// (bunbench -parts sustain, two runs of 3 minutes each way, 2026-12-02) the relay's process took 31-36 %
// of a core against 38-42 %, and PostgreSQL 60-65 % against 69-77 %; a row waits up to MinPollInterval
// longer. A full round still calls the next one at once, so a backlog drains as before.

// streamCheckInterval is how long the relay trusts what it last read of the catalog about the stream:
// EnableStream reaches a running relay within about this long.
const streamCheckInterval = time.Second

// streamState is what the relay knows about the stream.
type streamState struct {
	sizer claimSizer      // how many rows the next read asks for, under Config.BatchBytes
	busy  chan<- struct{} // Run's call to the helpers
	// active counts the workers of this relay in a stream round: while one is, the others do not poll for
	// streamed rows (streamReader.due), which that worker (and the helper a full round calls in) delivers. Polling
	// for them meanwhile cost an empty per-row round every few milliseconds: 41 µs of PostgreSQL CPU per
	// streamed event with the default two workers, against 18 with one (bunbench -parts drain).
	active atomic.Int32
	turn   atomic.Uint64 // the stream rounds begun: whose turn it is among the lanes (orderLanes)
	// lanesAt is when the relay last created the lanes' cursor rows (streamReader.lanes), in unix ns.
	lanesAt atomic.Int64
	// noInsertLogged is true once the relay found that its role may not create the lanes' cursor rows and
	// said so (streamReader.handOverUnlaned).
	noInsertLogged atomic.Bool
	// noTruncateLogged is true once the relay found that its role may not truncate the partitions of the
	// cursors' positions and said so (streamReader.rotate).
	noTruncateLogged atomic.Bool
	// rotateMissed counts the rotations in a row that gave up on a lock (streamReader.rotateFailed).
	rotateMissed atomic.Int64
	// handedOver is true when the relay's last stream round handed rows to the per-row path (keyed rows,
	// failed enqueues): the other workers then keep polling for per-row rows while a worker streams, to
	// claim them beside it (streamCovers).
	handedOver atomic.Bool
	spare      spareEvents // the event slices of finished rounds, for the next reads
	quiet      quietLanes  // which queues' lanes the last rounds left rows in (stream_quiet.go)

	mu        sync.Mutex
	checkedAt time.Time
	on        bool // the stream is on for the outbox
	cursor    bool // the cursor's table exists (migration 20261205000001 applied)

	// rotateAfter and rotateWarnAfter, when not 0 (set by the tests), replace positionsRotateAfter and
	// rotateMissedWarn.
	rotateAfter, rotateWarnAfter int64
	// legacy makes the relay behave as the release before the stream: it never streams and never reads
	// bunbox_stream. Set only by the tests (the rolling deploy).
	legacy bool
	// locked, when set (by the tests), is called when a stream round of the relay has locked the cursor
	// row of lane; the function it returns is called before the round releases it.
	locked func(lane string) (release func())
	// reading, when set (by the tests), is called before a stream round reads its batch k (k >= 1) while
	// the enqueues of the batches before run (readAhead).
	reading func(k int)
	// batches, when set (by the benchmarks), bounds a stream round's batches instead of
	// streamRoundBatches: 1 is the round before read-ahead.
	batches int
}

// streamReader reads the stream's rows (the snapshot cursor, store.Stream) for the rounds: the catalog's
// switch, the cursor's cluster, the reads of a round's batches and the enqueues they start (readAhead),
// the check for rows due. What it reads goes through the rounds' one pipeline (stream_round.go).
type streamReader struct {
	cfg       *Config
	db        *bun.DB
	log       *slog.Logger
	names     tables.Names
	st        *store.Stream
	state     *streamState
	wake      *wakeup.State // told of the rows read (internal/maintenance/wakeup)
	deliverer *deliverer    // starts the enqueues of each batch read
	queues    *fairQueues   // Config.Queues: the order of the lanes (stream_lanes.go)
}

// catalog returns whether the stream is on for the relay's outbox and whether the cursor's table
// exists, read from the catalog at most once per streamCheckInterval. A failed read keeps what was known:
// the round that follows meets the same failure.
func (sr *streamReader) catalog(ctx context.Context) (on, cursor bool) {
	s := sr.state
	if s.legacy {
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checkedAt.IsZero() && time.Since(s.checkedAt) < streamCheckInterval {
		return s.on, s.cursor
	}
	if on2, cursor2, err := sr.st.Catalog(ctx, sr.db); err == nil {
		s.on, s.cursor = on2, cursor2
		s.checkedAt = time.Now()
	}
	return s.on, s.cursor
}

// streaming reports whether the relay runs stream rounds, and creates the lanes' cursor rows that are
// missing about once per streamCheckInterval while it does (streamReader.lanes).
func (sr *streamReader) streaming(ctx context.Context) bool {
	on, _ := sr.catalog(ctx)
	if on {
		sr.lanes(ctx, false)
	}
	return on
}

// addRounds adds up the outcomes of two rounds of one iteration.
func addRounds(a, b BatchEvent) BatchEvent {
	a.Claimed += b.Claimed
	a.Published += b.Published
	a.Failed += b.Failed
	a.Dead += b.Dead
	a.Released += b.Released
	a.Duration += b.Duration
	a.Err = errors.Join(a.Err, b.Err)
	a.full = a.full || b.full
	a.streamed = a.streamed || b.streamed
	a.streamBusy = a.streamBusy || b.streamBusy
	return a
}
