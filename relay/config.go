package relay

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/bunbox/bunbox/fanout"
	"github.com/bunbox/bunbox/internal/configcheck"
	"github.com/bunbox/bunbox/internal/dsncheck"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// Defaults applied by New to the zero fields of a Config.
const (
	batchSizeDefault          = 1000
	batchBytesDefault         = 16 << 20
	concurrencyDefault        = 128
	workersDefault            = 2
	pollIntervalDefault       = 500 * time.Millisecond
	minPollIntervalDefault    = 5 * time.Millisecond
	taskRetentionDefault      = 24 * time.Hour
	maxAttemptsDefault        = 10
	retryBackoffDefault       = time.Second
	retryBackoffMaxDefault    = time.Hour
	roundBackoffDefault       = 100 * time.Millisecond
	roundBackoffMaxDefault    = 30 * time.Second
	enqueueTimeoutDefault     = 5 * time.Second
	publishedRetentionDefault = 7 * 24 * time.Hour
	cleanupIntervalDefault    = time.Minute
	cleanupBatchSizeDefault   = 1000
	keyCheckIntervalDefault   = 10 * time.Millisecond
	// cancelCheckIntervalDefault is Config.CancelCheckInterval's default.
	cancelCheckIntervalDefault = 100 * time.Millisecond
	// notifyChannel is the PostgreSQL channel the relay listens on and the trigger of EnableNotify notifies.
	notifyChannel = "bunbox_outbox"
)

// Enqueuer is what the relay needs from asynq: *asynq.Client implements it. Pass a wrapper in
// Config.Enqueuer to observe or alter enqueues. When the Enqueuer also has a `Ping() error` method (as
// *asynq.Client does), New checks with it that Redis answers. Its errors are outages that charge no row,
// except asynq's refusals of the task itself and errors wrapping ErrTaskRejected.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, t *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

var _ Enqueuer = (*asynq.Client)(nil)

// pinger is the optional health check of an Enqueuer, detected by a type assertion.
type pinger interface{ Ping() error }

var _ pinger = (*asynq.Client)(nil)

// Config tunes a Relay. The zero value is ready to use.
type Config struct {
	// BatchSize is the largest number of rows claimed, enqueued and marked in one round, 1 to 10000.
	// Defaults to 1000.
	BatchSize int
	// BatchBytes bounds the bytes of payload and metadata (as JSON text, an encoded payload as its bytes)
	// one round claims: the claim stops adding rows once the next one would go over, and always takes at
	// least one row, however large. With Workers rounds at once, a relay holds at most about Workers ×
	// BatchBytes of events (plus one row per worker over it), and one BatchBytes more while it streams (a
	// stream round reads its next batch while it enqueues one). The payloads that Codec decodes are held
	// decoded only while their enqueue runs, each counted twice (the task message asynq makes of it is a
	// copy), and a decode starts only while those in flight count at most BatchBytes: they and their task
	// messages take at most BatchBytes more, plus twice the Codec's limit (model.MaxDecodedSize), however
	// small they are stored. 1 byte to 1 GiB. Defaults to 16 MiB.
	BatchBytes int64
	// Concurrency bounds the enqueues running at once over all workers, 1 to 1024. Defaults to 128.
	// asynq has one script call per enqueue; the relay's own Redis client pipelines the calls in flight,
	// so more of them in flight make fewer, larger round trips (see docs/performance.md for the figures
	// that chose the default).
	Concurrency int
	// Workers is how many rounds one relay runs at once, each claiming its own batch (SKIP LOCKED keeps
	// them apart) and all sharing the Concurrency bound: while one batch is marked and committed, the
	// enqueues of the other keep Redis busy. 1 to 64. Defaults to 2.
	Workers int
	// PollInterval is the longest an idle relay waits before it looks for rows again: the safety net
	// behind notifications and the adaptive poll. Defaults to 500ms.
	PollInterval time.Duration
	// MinPollInterval is the wait after a round that found nothing, for the first second after the
	// relay last saw rows; then the wait doubles with every empty round up to PollInterval. It is the idle
	// latency under traffic when no NOTIFY trigger is installed. With the stream on (EnableStream), it is
	// also the wait after a stream round that delivered rows but was not full, so that steady traffic is
	// read in rounds of what commits in MinPollInterval rather than round after round of a few rows.
	// Defaults to 5ms.
	MinPollInterval time.Duration
	// DisableNotify turns off listening on the NOTIFY channel (which needs the pgdriver or pgx driver and the
	// trigger of EnableNotify to be useful). Defaults to false: the relay listens when the driver is
	// pgdriver or pgx (github.com/jackc/pgx/v5/stdlib).
	DisableNotify bool
	// ListenURL is a PostgreSQL connection string (a URL or libpq's key=value form, read as
	// connect.Postgres reads it) for the relay's LISTEN, which needs a server session of its own: give a
	// direct connection to the same database when the relay's *bun.DB goes through a pooler in transaction
	// mode (PgBouncer). It is opened with the driver of the relay's *bun.DB, with at most 2 connections.
	// The relay listens only on a connection it can tell is direct (pg_backend_pid() is the process id the
	// server gave the connection at start-up; a pooler hands out its own) and, with ListenURL, to the
	// relay's database; otherwise it polls (PollInterval, and MinPollInterval while rows come) and logs
	// why at start, at Warn when ListenURL was given. Defaults to "": the relay's own *bun.DB, when its
	// connections are direct.
	ListenURL string
	// PreparedStatements runs the relay's hottest statements (the keyed claim and the mark) as statements
	// prepared once per connection, which saves PostgreSQL planning them in every round. Turn it on only
	// where every connection is a server session of its own: a direct connection, or PgBouncer 1.21+ with
	// max_prepared_statements. Behind a transaction pooler that does not track prepared statements, rounds
	// would fail (SQLSTATE 42P05 or 26000) until the relay turned them off. Defaults to false: plain
	// statements, safe behind any pooler.
	PreparedStatements bool
	// Location is the outbox this relay serves: its schema and table prefix (the relay claims, marks, cleans
	// up and reconciles only that outbox's rows, and listens on its NOTIFY channel; run one relay per
	// outbox) and its codec, which decodes the payloads the Outbox encoded before they are enqueued: the
	// task then carries the plain payload, without the encoding's headers. With a codec, a row whose key id
	// is not in the Keyring is charged an attempt and retried with backoff (a relay given the key delivers
	// it), dead after MaxAttempts; one whose bytes do not decode under a key it holds is marked dead at
	// once, kept, with a last_error naming the key id; a payload that decodes to more than the codec's limit
	// (model.MaxDecodedSize: 1 MiB unless set; give it at least the writers') is marked dead at once too,
	// the decoding stopped one byte past it. Without one, encoded payloads are enqueued as they are, with
	// their encoding headers, for the consumer to decode (worker.WithLocation), and an encrypted payload
	// stays encrypted in Redis. Defaults to the zero Location: the default outbox, no codec.
	Location model.Location
	// TaskRetention is how long asynq keeps a completed task, which is how long its TaskID dedupes a
	// repeated enqueue of the same event. Defaults to 24h.
	TaskRetention time.Duration
	// MaxAttempts is how many failed enqueues of one row the relay makes before it marks the row dead.
	// Defaults to 10.
	MaxAttempts int
	// RetryBackoff is the delay before a failed row is tried again; it doubles with each attempt up to
	// RetryBackoffMax, and each delay is cut by a random part of up to half, so that rows that failed
	// together are not all tried again together. Defaults to 1s.
	RetryBackoff time.Duration
	// RetryBackoffMax caps RetryBackoff's growth. Defaults to 1h.
	RetryBackoffMax time.Duration
	// RoundBackoff is the wait after a failed round (PostgreSQL or Redis unreachable); it doubles with each
	// failed round in a row up to RoundBackoffMax, and the first good round resets it. Each wait is cut by a
	// random part of up to half, so that replicas that failed together do not retry in lockstep.
	// Defaults to 100ms.
	RoundBackoff time.Duration
	// RoundBackoffMax caps RoundBackoff's growth. Defaults to 30s.
	RoundBackoffMax time.Duration
	// UnreadyAfter is how long the relay's rounds must have been failing (from the first failure, with no
	// round succeeding since) before Ready, and the /readyz probe of HealthHandler, report the relay not
	// ready, with the last round's error; the first round that succeeds makes it ready again. A negative
	// value never does. Defaults to 30s: several rounds, backing off from RoundBackoff.
	UnreadyAfter time.Duration
	// EnqueueTimeout bounds one enqueue. Defaults to 5s. The enqueues that one of the relay's goroutines
	// starts within a hundredth of it share a deadline, so each gets between 99/100 of it and all of it.
	EnqueueTimeout time.Duration
	// PublishedRetention is how long published rows are kept before the relay deletes them; a negative value keeps
	// them forever. Defaults to 7 days.
	PublishedRetention time.Duration
	// CleanupInterval is how often the relay deletes expired published rows. Defaults to 1m.
	CleanupInterval time.Duration
	// CleanupBatchSize is how many rows one cleanup statement deletes, 1 to 100000. Defaults to 1000.
	CleanupBatchSize int
	// Routes fans events out to several listeners, each its own asynq task that retries alone; see fanout.Routes.
	// Defaults to none: one task per event.
	Routes fanout.Routes
	// Logger receives the relay's logs. Defaults to a logger that discards everything below Warn and
	// writes warnings and errors to stderr.
	Logger *slog.Logger
	// Enqueuer, when set, is used instead of an asynq.Client built from the Redis options given to New; the
	// relay does not close it. Defaults to nil.
	Enqueuer Enqueuer
	// Observer are called as the relay works; see Observer. Defaults to no hooks.
	Observer Observer
	// TracerProvider makes the relay's publish spans (one per enqueued row; see the package doc).
	// Defaults to the global one, otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// KeyCheckInterval is how often the relay looks up in asynq the tasks of keyed events (see
	// model.WithOrderingKey) while some are in flight, to hand out the next event of a key once its task
	// completed; after 10 looks in a row that found nothing new it doubles, up to 10 times itself.
	// Defaults to 10ms.
	KeyCheckInterval time.Duration
	// Inspector looks up the tasks of keyed events. Defaults to an asynq.Inspector on the Redis options
	// given to New; with neither, keyed events are not relayed (they wait, and the relay says so in its log).
	Inspector Inspector
	// DisableReconciler turns off the reconciler that Run runs next to the relay: for teams that run
	// relay.NewReconciler apart. Defaults to false: Run also reconciles (see Reconciler), one relay per
	// database at a time by the lease "bunbox.reconciler" in the table bunbox_leases, so that the tasks
	// Redis lost (a failover, a restart without persistence, an eviction) are delivered again within about
	// Reconciler.Interval.
	DisableReconciler bool
	// Reconciler tunes the reconciler that Run runs. Its TaskRetention and Routes are always the relay's,
	// and its Window defaults to 1h, or to half of TaskRetention when that is shorter; the other fields as
	// in ReconcilerConfig, with the relay's Logger. Defaults to those.
	Reconciler ReconcilerConfig
	// IdleInTransactionTimeout is how long PostgreSQL lets a relay transaction sit without a word from the
	// relay before it ends the session and releases the rows it claimed (idle_in_transaction_session_timeout,
	// and tcp_user_timeout for a reply it cannot deliver, set in each transaction with SET LOCAL, so it holds
	// behind a transaction pooler). It is what frees the claims of a relay cut off by a network partition, for
	// the other relays to deliver; a round that waits long on Redis shows the server it is alive every third
	// of it. At least 1s; negative leaves the server's setting. Defaults to 15s.
	IdleInTransactionTimeout time.Duration
	// StatementTimeout bounds each statement of a relay transaction (statement_timeout, SET LOCAL).
	// At least 1s; negative leaves the server's setting. Defaults to 30s.
	StatementTimeout time.Duration
	// LockTimeout bounds each wait of a relay transaction for a lock (lock_timeout, SET LOCAL), such as a
	// migration's on the table: the round fails and is retried instead of queueing behind it. At least 1ms;
	// negative leaves the server's setting. Defaults to 10s.
	LockTimeout time.Duration
	// Queues, when set, claims the rows of each named queue apart, so that a backlog in one queue does not
	// delay another: each round splits its rows between the named queues by weight (as asynq's
	// Config.Queues), a queue with fewer rows than its part leaving the rest to the others, and the queues
	// not named share one part of weight 1, first come first served. Names must not be empty; weights are
	// 1 to 1000000. Keyed events (model.WithOrderingKey) are claimed before the queues' parts, as without
	// Queues. While the rounds leave rows behind in some queue (a backlog), a lane of the relay's own
	// serves the named queues that have none: it looks for new rows in them every MinPollInterval and
	// claims and enqueues them in rounds of up to min(BatchSize, Concurrency) rows next to the workers',
	// so that they do not wait for the backlog's rounds in flight (see docs/cancel-and-queues.md).
	// Defaults to none: one first-come-first-served claim over all queues, and no lane. On an outbox with
	// the stream on (EnableStream) it splits only the per-row path's rows: streamed rows go in commit order,
	// all queues alike, and the relay logs that at Warn when it finds the stream on.
	Queues map[string]int
	// StrictPriority, with Queues, claims the queues in order of weight, highest first, each taking all it
	// has before a lower one gets any of the round (the queues not named come last). Defaults to false:
	// the rows are split by weight.
	StrictPriority bool
	// WakeInterval is how often an idle relay reads the last value of the sequence behind outbox_events.id
	// (one autocommitted statement, safe behind a transaction pooler, nothing on the write path), to run a
	// round as soon as a row was inserted: the first event after a quiet spell is relayed within about
	// WakeInterval of its commit instead of up to PollInterval. It needs SELECT or USAGE on that sequence
	// (`GRANT USAGE ON SEQUENCE outbox_events_id_seq TO relay_role`) and the sequence's CACHE at 1 (as the
	// migration makes it); otherwise the relay logs a warning at start and polls. Negative turns it off.
	// Defaults to 5ms.
	WakeInterval time.Duration
	// CancelCheckInterval is how often the relay looks for cancelled events (bunx.Outbox.Cancel) whose
	// tasks are still to be taken out of asynq; the look is one index probe when there are none.
	// Defaults to 100ms.
	CancelCheckInterval time.Duration

	now    func() time.Time
	tracer trace.Tracer
}

func (c Config) withDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, batchSizeDefault)
	c.BatchBytes = cmp.Or(c.BatchBytes, batchBytesDefault)
	c.Concurrency = cmp.Or(c.Concurrency, concurrencyDefault)
	c.Workers = cmp.Or(c.Workers, workersDefault)
	c.PollInterval = cmp.Or(c.PollInterval, pollIntervalDefault)
	c.MinPollInterval = cmp.Or(c.MinPollInterval, min(minPollIntervalDefault, c.PollInterval))
	c.TaskRetention = cmp.Or(c.TaskRetention, taskRetentionDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, maxAttemptsDefault)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, retryBackoffDefault)
	c.RetryBackoffMax = cmp.Or(c.RetryBackoffMax, max(retryBackoffMaxDefault, c.RetryBackoff))
	c.RoundBackoff = cmp.Or(c.RoundBackoff, roundBackoffDefault)
	c.RoundBackoffMax = cmp.Or(c.RoundBackoffMax, max(roundBackoffMaxDefault, c.RoundBackoff))
	c.UnreadyAfter = cmp.Or(c.UnreadyAfter, 30*time.Second)
	c.EnqueueTimeout = cmp.Or(c.EnqueueTimeout, enqueueTimeoutDefault)
	c.PublishedRetention = cmp.Or(c.PublishedRetention, publishedRetentionDefault)
	c.CleanupInterval = cmp.Or(c.CleanupInterval, cleanupIntervalDefault)
	c.CleanupBatchSize = cmp.Or(c.CleanupBatchSize, cleanupBatchSizeDefault)
	c.Logger = cmp.Or(c.Logger, defaultLogger())
	c.KeyCheckInterval = cmp.Or(c.KeyCheckInterval, keyCheckIntervalDefault)
	c.IdleInTransactionTimeout = cmp.Or(c.IdleInTransactionTimeout, idleInTransactionTimeoutDefault)
	c.StatementTimeout = cmp.Or(c.StatementTimeout, statementTimeoutDefault)
	c.LockTimeout = cmp.Or(c.LockTimeout, lockTimeoutDefault)
	c.CancelCheckInterval = cmp.Or(c.CancelCheckInterval, cancelCheckIntervalDefault)
	c.WakeInterval = cmp.Or(c.WakeInterval, wakeIntervalDefault)
	if c.now == nil {
		c.now = time.Now
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	c.tracer = c.TracerProvider.Tracer(tracerName)
	c.Reconciler = c.reconcilerDefaults()
	return c
}

func (c Config) validate() error {
	var p configcheck.Problems
	check := p.Check
	check(c.BatchSize >= 1 && c.BatchSize <= 10000, "BatchSize must be between 1 and 10000, got %d", c.BatchSize)
	check(c.BatchBytes >= 1 && c.BatchBytes <= 1<<30, "BatchBytes must be between 1 and 1 GiB (1073741824), got %d", c.BatchBytes)
	check(c.Concurrency >= 1 && c.Concurrency <= 1024, "Concurrency must be between 1 and 1024, got %d", c.Concurrency)
	check(c.Workers >= 1 && c.Workers <= 64, "Workers must be between 1 and 64, got %d", c.Workers)
	check(c.PollInterval > 0, "PollInterval must be positive, got %s", c.PollInterval)
	check(c.MinPollInterval > 0 && c.MinPollInterval <= c.PollInterval,
		"MinPollInterval must be positive and at most PollInterval (%s), got %s", c.PollInterval, c.MinPollInterval)
	check(c.TaskRetention >= time.Second, "TaskRetention must be at least 1s (it is the dedupe window), got %s", c.TaskRetention)
	check(c.MaxAttempts >= 1, "MaxAttempts must be at least 1, got %d", c.MaxAttempts)
	check(c.RetryBackoff > 0, "RetryBackoff must be positive, got %s", c.RetryBackoff)
	check(c.RetryBackoffMax >= c.RetryBackoff, "RetryBackoffMax must be at least RetryBackoff (%s), got %s", c.RetryBackoff, c.RetryBackoffMax)
	check(c.RoundBackoff > 0, "RoundBackoff must be positive, got %s", c.RoundBackoff)
	check(c.RoundBackoffMax >= c.RoundBackoff, "RoundBackoffMax must be at least RoundBackoff (%s), got %s", c.RoundBackoff, c.RoundBackoffMax)
	check(c.EnqueueTimeout > 0, "EnqueueTimeout must be positive, got %s", c.EnqueueTimeout)
	check(c.CleanupInterval > 0, "CleanupInterval must be positive, got %s", c.CleanupInterval)
	check(c.CleanupBatchSize >= 1 && c.CleanupBatchSize <= 100000, "CleanupBatchSize must be between 1 and 100000, got %d", c.CleanupBatchSize)
	check(c.KeyCheckInterval > 0, "KeyCheckInterval must be positive, got %s", c.KeyCheckInterval)
	if c.ListenURL != "" {
		if err := dsncheck.Check(c.ListenURL); err != nil {
			p.Add(fmt.Errorf("ListenURL: %w", err)) // the connect error masks the password
		}
	}
	if !c.DisableReconciler {
		p.Prefixed("Reconciler.", c.Reconciler.problems())
	}
	p.Add(c.Routes.Validate())
	p.Add(validateBound("IdleInTransactionTimeout", c.IdleInTransactionTimeout, time.Second))
	p.Add(validateBound("StatementTimeout", c.StatementTimeout, time.Second))
	p.Add(validateBound("LockTimeout", c.LockTimeout, time.Millisecond))
	check(c.CancelCheckInterval > 0, "CancelCheckInterval must be positive, got %s", c.CancelCheckInterval)
	p.Add(validateTables(c.Location))
	p.Add(validateQueues(c.Queues))
	return p.Err(ErrInvalidConfig)
}

// defaultLogger is the logger of a Config without one: warnings and errors to stderr, nothing else.
func defaultLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// tables are the outbox's table names, for open.
func (c Config) tables() tables.Names { return mustNames(c.Location) }
