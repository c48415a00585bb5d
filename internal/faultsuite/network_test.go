//go:build fault

package faultsuite

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/netproxy"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/streamsql"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// claimReleaseMax is the promise under a partition: a relay cut off from PostgreSQL loses its claims, and
// another relay delivers them, within 30 s with the default Config.
const claimReleaseMax = 30 * time.Second

// netScenario is one network fault. Two relays run, A (index 0) and B (1), each behind proxies of its own
// to PostgreSQL and to Redis; the producer and the workers connect directly. fault runs once A holds
// claimed rows mid-drain, injects the fault and ends it, and returns a note for the summary.
type netScenario struct {
	name    string
	faulted []int // the relays whose links the fault touches: their sessions' lock holds are measured
	// aloneFirst starts relay A alone: B starts once the fault caught A holding claimed rows (e.startB),
	// so that A has claims to lose however fast B would have drained the backlog.
	aloneFirst bool
	fault      func(t *testing.T, e *netEnv) string
}

var netScenarios = []netScenario{
	{"pg-partition", []int{0}, true, pgPartitionHold},
	{"pg-partition-heals", []int{0}, true, pgPartitionHeals},
	{"pg-latency-spikes", []int{0}, false, latencySpikes},
	{"resets", []int{0}, false, resets},
	{"redis-partition", []int{0, 1}, false, redisPartition},
	{"redis-reply-lost", []int{0, 1}, false, redisReplyLost},
}

// TestFaultNetwork runs the network scenarios (netScenarios), each on a database and a Redis of its own
// with the producer, two workers and two relays as processes (faultproc), and checks each with the ledger
// of TestFault: every event of every committed transaction handled once, none of a rolled-back one, no
// task enqueued twice, nothing left pending, dead or locked, per-key order kept. It prints a summary with
// each scenario's ledger and the longest time a session of a faulted relay held rows claimed.
func TestFaultNetwork(t *testing.T) {
	outboxtest.SkipShort(t)
	began := time.Now()
	dir := t.TempDir()
	if keep := os.Getenv("FAULT_DIR"); keep != "" {
		dir = filepath.Join(keep, "network")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildHelper(t, dir)
	pg := outboxtest.StartPostgres(t)
	var rows []netRow
	for i, sc := range netScenarios {
		t.Run(sc.name, func(t *testing.T) {
			rows = append(rows, runNetScenario(t, pg, bin, filepath.Join(dir, sc.name), int64(i+1), sc))
		})
	}
	summary := netSummary(rows, time.Since(began))
	fmt.Print(summary)
	t.Log(summary)
}

// netEnv is what a scenario's fault works with.
type netEnv struct {
	db      *bun.DB            // direct, to the scenario's database
	pgProxy [2]*netproxy.Proxy // relay A's and B's link to PostgreSQL
	rdProxy [2]*netproxy.Proxy // and to Redis
	locks   *lockWatcher
	ins     *asynq.Inspector
	startB  func() // starts relay B if it is not running yet
}

// netRow is a scenario's line of the summary.
type netRow struct {
	name            string
	committed       int // events of committed transactions
	delivered       int
	routed          int
	lost, dupEffect int
	dupEnqueue      int
	conflicts       int
	pending, dead   int
	locked          int
	longestHold     time.Duration
	note            string
	wall            time.Duration
	failed          bool
}

func runNetScenario(t *testing.T, pg *outboxtest.Postgres, bin, dir string, seed int64, sc netScenario) netRow {
	began := time.Now()
	// The ledgers are appended to: a FAULT_DIR kept from an earlier run must not mix into this one.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := "net_" + strings.ReplaceAll(sc.name, "-", "_")
	admin := pg.Open(t, nil)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	url := strings.Replace(pg.URL(), "/postgres?", "/"+name+"?", 1)
	db := outboxtest.OpenURL(t, url, nil)
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := db.ExecContext(ctx, appSchema+"\nCREATE EXTENSION pgrowlocks;"); err != nil {
		t.Fatalf("app schema: %v", err)
	}
	if err := relay.EnableNotifyTrigger(ctx, db, model.Location{}); err != nil {
		t.Fatalf("notify trigger: %v", err)
	}
	setStream(t, db)
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	e := &netEnv{db: db, ins: asynq.NewInspector(asynq.RedisClientOpt{Addr: rd.Addr()})}
	t.Cleanup(func() { _ = e.ins.Close() })
	for i := range 2 {
		var err error
		if e.pgProxy[i], err = netproxy.New(pg.Addr()); err != nil {
			t.Fatal(err)
		}
		if e.rdProxy[i], err = netproxy.New(rd.Addr()); err != nil {
			t.Fatal(err)
		}
		// Closed after the processes (cleanups run last-in first-out): a proxy closed under a running
		// relay would look like one more fault.
		t.Cleanup(func() { _ = e.pgProxy[i].Close(); _ = e.rdProxy[i].Close() })
	}
	e.locks = watchLocks(t, url)

	var relays, workers []*proc
	for i := range 2 {
		id := fmt.Sprintf("r%d", i)
		relays = append(relays, newProc(t, dir, bin, id, "relay", "-id", id, "-dir", dir,
			"-db", fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", e.pgProxy[i].Addr(), name),
			"-redis", e.rdProxy[i].Addr()))
		id = fmt.Sprintf("w%d", i)
		workers = append(workers, newProc(t, dir, bin, id, "worker", "-id", id, "-dir", dir, "-db", url,
			"-redis", rd.Addr(), "-seed", fmt.Sprint(seed*10+int64(i)), "-work", "10ms", "-lost-ack", "0.01"))
	}
	producer := newProc(t, dir, bin, "producer", "producer", "-id", "producer", "-dir", dir, "-db", url,
		"-seed", fmt.Sprint(seed), "-duration", "8s", "-rate", "60")
	all := append(append([]*proc{}, relays...), workers...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range append(all, producer) {
				t.Logf("--- last lines of %s:\n%s", p.name, p.tail(25))
			}
		}
	})
	for _, w := range workers {
		w.start(t)
	}
	producer.start(t)
	// A backlog builds up before the relays start, so that the fault meets them mid-drain.
	outboxtest.WaitFor(t, 90*time.Second, "a backlog of 50 rows", func() bool {
		return outboxtest.Count(t, db, "outbox_events", "TRUE") >= 50
	})
	relays[0].start(t)
	var startB sync.Once
	e.startB = func() { startB.Do(func() { relays[1].start(t) }) }
	if !sc.aloneFirst {
		e.startB()
	}
	note := sc.fault(t, e)
	e.startB()

	if !producer.wait(time.Minute) {
		t.Fatalf("the producer did not finish")
	}
	led := readLedger(t, dir, db)
	var progress drainState
	drainStart := time.Now()
	for {
		progress = drain(ctx, db, e.ins, led, time.Time{})
		if progress.done() {
			break
		}
		if time.Since(drainStart) > 90*time.Second {
			t.Errorf("not drained after 90s: %s", progress)
			break
		}
		time.Sleep(200 * time.Millisecond) // a poll step
	}
	locked := lockedRows(t, db)
	var stopping sync.WaitGroup
	for _, p := range all {
		stopping.Go(func() { p.stop(t, 15*time.Second) })
	}
	stopping.Wait()
	e.locks.stop()
	st := stats{progress: progress, wall: time.Since(began)}
	res := verify(t, db, e.ins, dir, led, &st, locked)
	ord := checkOrdering(t, db, dir, map[int]time.Time{}, led)
	res.assert(t)
	ord.assert(t)
	var ports []*netproxy.Proxy
	for _, i := range sc.faulted {
		ports = append(ports, e.pgProxy[i])
	}
	hold, _ := e.locks.longest(ports...)
	return netRow{name: sc.name, committed: len(led.expected), delivered: res.delivered, routed: res.routed,
		lost: len(res.lost), dupEffect: res.dupEffects, dupEnqueue: res.dupEnqueues, conflicts: res.conflicts,
		pending: res.pending, dead: res.dead, locked: locked, longestHold: hold, note: note,
		wall: time.Since(began), failed: t.Failed()}
}

// waitHolding waits until a session of relay i holds rows of outbox_events (mid-round).
func waitHolding(t *testing.T, e *netEnv, i int) {
	t.Helper()
	outboxtest.WaitFor(t, 30*time.Second, fmt.Sprintf("relay %d mid-round", i), func() bool {
		return len(e.locks.holding(e.pgProxy[i])) > 0
	})
}

// waitHoldingRows waits until a session of relay A holds rows it claimed (rowsLockedBy), not only a lock
// on the tables: a round that found nothing (a per-row round, or a stream round with nothing to read)
// holds table locks for a moment and nothing a partition could catch. With the stream on and its rounds
// quick, partitions timed by the table locks alone missed A's rounds with rows ten times in a row.
func waitHoldingRows(t *testing.T, e *netEnv) {
	t.Helper()
	outboxtest.WaitFor(t, 30*time.Second, "relay A mid-round, holding rows", func() bool {
		pids := e.locks.holding(e.pgProxy[0])
		return len(pids) > 0 && len(rowsLockedBy(t, e.db, pids)) > 0
	})
}

// partitionHolding partitions relay A's link to PostgreSQL while A holds claimed rows, and returns when
// it was partitioned and the ids of the rows A's silent sessions hold. A partition that fell between two of
// A's rounds caught nothing: it is healed and tried again.
func partitionHolding(t *testing.T, e *netEnv) (time.Time, []int64) {
	t.Helper()
	p := e.pgProxy[0]
	// Slow enqueues keep A's rounds open long enough for the partition to fall inside one: the claims are
	// held while their enqueues run. The latency ends once the partition caught A.
	e.rdProxy[0].SetLatency(150 * time.Millisecond)
	defer e.rdProxy[0].SetLatency(0)
	for attempt := 1; ; attempt++ {
		waitHoldingRows(t, e)
		p.Partition()
		at := time.Now()
		var ids []int64
		// The statements in flight finish and their answers are held: the sessions go idle in
		// transaction, holding what they claimed.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if pids := e.locks.idleHolding(p); len(pids) > 0 {
				ids = rowsLockedBy(t, e.db, pids)
				if len(ids) > 0 {
					e.startB()
					return at, ids
				}
			}
			time.Sleep(50 * time.Millisecond) // a poll step
		}
		p.Heal()
		if attempt == 10 {
			t.Fatalf("no partition caught relay A holding rows in 10 attempts")
		}
	}
}

// rowsLockedBy lists the unpublished outbox rows the sessions of pids hold locks on (pgrowlocks): the rows
// they claimed.
func rowsLockedBy(t *testing.T, db *bun.DB, pids []int) []int64 {
	t.Helper()
	var ids []int64
	err := db.NewRaw(`SELECT o.id FROM pgrowlocks('outbox_events') l JOIN outbox_events o ON o.ctid = l.locked_row
WHERE l.pids && ?0::int[] AND o.published_at IS NULL
UNION ALL
SELECT e.id FROM outbox_events e `+streamsql.Cursor+`
WHERE `+streamsql.Waiting+` AND EXISTS (SELECT 1 FROM pgrowlocks('bunbox_stream') l WHERE l.pids && ?0::int[])`,
		pgdialect.Array(pids)).Scan(context.Background(), &ids)
	if err != nil {
		t.Fatalf("pgrowlocks: %v", err)
	}
	return ids
}

// allPublished reports whether every row of ids is published.
func allPublished(t *testing.T, db *bun.DB, ids []int64) bool {
	t.Helper()
	var n int
	if err := db.NewRaw("SELECT count(*) FROM "+pendingFrom+" WHERE e.id IN (?) AND (e.published_at IS NULL OR "+streamsql.Waiting+")",
		bun.List(ids)).Scan(context.Background(), &n); err != nil {
		t.Fatalf("count unpublished: %v", err)
	}
	return n == 0
}

// pgPartitionHold: relay A's link to PostgreSQL goes dark mid-drain, holding bytes in both directions
// (A's sessions stay open on the server, idle in transaction, as in a real partition). The server ends
// them after IdleInTransactionTimeout; relay B delivers the rows A had claimed, within 30 s. The partition
// lasts until everything is drained, and ends with A's connections closed.
//
// The 30 s bound is on the rows only A held back: a keyed row behind an earlier event of its key that no
// worker had completed at the partition waits for that worker too, whoever relays it. With the stream on,
// A's cursor holds back every streamed row not yet delivered, so those keyed tails are in what A held;
// they are timed apart and bounded by the scenario's drain.
func pgPartitionHold(t *testing.T, e *netEnv) string {
	at, ids := partitionHolding(t, e)
	behind := behindTheirKey(t, e.db, ids)
	free := slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return slices.Contains(behind, id) })
	p := e.pgProxy[0]
	outboxtest.WaitFor(t, 2*claimReleaseMax, "relay B delivers the rows A claimed", func() bool { return allPublished(t, e.db, free) })
	delivered := time.Since(at)
	outboxtest.WaitFor(t, 2*claimReleaseMax, "relay B delivers the keyed rows behind them", func() bool { return allPublished(t, e.db, ids) })
	tail := time.Since(at)
	outboxtest.WaitFor(t, 2*claimReleaseMax, "A's sessions release their locks", func() bool { return len(e.locks.holding(p)) == 0 })
	released := time.Since(at)
	if delivered > claimReleaseMax {
		t.Errorf("the %d rows A claimed were delivered %s after the partition, want within %s", len(free), delivered, claimReleaseMax)
	}
	outboxtest.WaitFor(t, 90*time.Second, "B drains while A is dark", func() bool {
		return pendingCount(t, e.db, "TRUE") == 0
	})
	p.CloseAll() // the partition ends with the connections gone
	p.Heal()
	return fmt.Sprintf("A held %d rows; released %.1fs, delivered by B %.1fs after the partition (%d keyed behind their key: %.1fs)",
		len(ids), released.Seconds(), delivered.Seconds(), len(behind), tail.Seconds())
}

// behindTheirKey returns the rows of ids with an ordering key whose earlier event no worker has completed
// yet: they go only after it, whichever relay holds them.
func behindTheirKey(t *testing.T, db *bun.DB, ids []int64) []int64 {
	t.Helper()
	var behind []int64
	err := db.NewRaw(`SELECT e.id FROM outbox_events e WHERE e.id = ANY(?0::bigint[]) AND e.ordering_key IS NOT NULL
  AND EXISTS (SELECT 1 FROM outbox_events k WHERE k.ordering_key = e.ordering_key AND k.id < e.id AND k.completed_at IS NULL)`,
		pgdialect.Array(ids)).Scan(context.Background(), &behind)
	if err != nil {
		t.Fatalf("keyed rows behind their key: %v", err)
	}
	return behind
}

// pgPartitionHeals: relay A's link to PostgreSQL goes dark for 4 s mid-drain, shorter than the bounds, and
// heals: the held bytes arrive and A carries on (or, where its driver gave up first, its round fails and
// the rows go again, deduplicated by TaskID).
func pgPartitionHeals(t *testing.T, e *netEnv) string {
	at, ids := partitionHolding(t, e)
	p := e.pgProxy[0]
	time.Sleep(time.Until(at.Add(4 * time.Second))) // the partition's length, not a wait for something
	p.Heal()
	outboxtest.WaitFor(t, 2*claimReleaseMax, "the rows A claimed are delivered", func() bool { return allPublished(t, e.db, ids) })
	return fmt.Sprintf("A held %d rows through a 4s partition; delivered %.1fs after it began", len(ids), time.Since(at).Seconds())
}

// latencySpikes: relay A's links to PostgreSQL and Redis get 300 ms one way (600 ms a round trip) for 4 s,
// twice, mid-drain.
func latencySpikes(t *testing.T, e *netEnv) string {
	for range 2 {
		waitHolding(t, e, 0)
		e.pgProxy[0].SetLatency(300 * time.Millisecond)
		e.rdProxy[0].SetLatency(300 * time.Millisecond)
		time.Sleep(4 * time.Second) // the spike's length, not a wait for something
		e.pgProxy[0].SetLatency(0)
		e.rdProxy[0].SetLatency(0)
		time.Sleep(time.Second) // between spikes
	}
	return "2 spikes of 300ms one way (PostgreSQL and Redis), 4s each"
}

// resets: relay A's connections to PostgreSQL and Redis are reset (RST) three times, mid-round.
func resets(t *testing.T, e *netEnv) string {
	for range 3 {
		waitHolding(t, e, 0)
		e.pgProxy[0].Reset()
		e.rdProxy[0].Reset()
		time.Sleep(time.Second) // between resets
	}
	return "3 resets of A's PostgreSQL and Redis connections, each mid-round"
}

// redisPartition: both relays lose Redis for 6 s mid-drain (bytes held both ways, connections open), then
// the network heals: everything is delivered, once.
func redisPartition(t *testing.T, e *netEnv) string {
	waitHolding(t, e, 0)
	for _, p := range e.rdProxy {
		p.Partition()
	}
	time.Sleep(6 * time.Second) // the partition's length, not a wait for something
	for _, p := range e.rdProxy {
		p.Heal()
	}
	healed := time.Now()
	// Keyed rows wait behind their key's previous event until a worker handled it: the unkeyed ones
	// show how soon the relays are back.
	outboxtest.WaitFor(t, 60*time.Second, "the unkeyed backlog published after the heal", func() bool {
		return pendingCount(t, e.db, "e.ordering_key IS NULL") == 0
	})
	return fmt.Sprintf("6s partition of both relays' Redis links; unkeyed backlog published %.1fs after the heal", time.Since(healed).Seconds())
}

// redisReplyLost: for 3 s mid-drain the relays' enqueues reach Redis but its replies are dropped: the
// tasks exist, the relays time out, release the rows and enqueue them again later, which asynq refuses as
// a TaskID conflict: delivered, once.
func redisReplyLost(t *testing.T, e *netEnv) string {
	waitHolding(t, e, 0)
	for _, p := range e.rdProxy {
		p.DropReplies(true)
	}
	time.Sleep(3 * time.Second) // the fault's length, not a wait for something
	for _, p := range e.rdProxy {
		p.DropReplies(false)
	}
	return "3s of Redis replies dropped on both relays' links"
}

// lockWatcher samples, every 100 ms, the sessions that hold rows of outbox_events (or, with the stream
// on, the cursor row of bunbox_stream) locked inside a transaction (the table's RowShareLock of SELECT ... FOR UPDATE, or RowExclusiveLock of UPDATE and
// DELETE: row locks themselves are not in pg_locks), with their client port, so that a session can be told
// apart by the proxy it came through.
type lockWatcher struct {
	mu       sync.Mutex
	sessions map[sessionKey]*sessionSeen
	latest   []sessionSample
	cancel   context.CancelFunc
	done     chan struct{}
}

type sessionKey struct {
	pid       int
	xactStart time.Time
}

type sessionSeen struct {
	port      int
	xactStart time.Time
	last      time.Time // the last sample that saw it holding, on the server's clock
}

type sessionSample struct {
	Pid       int       `bun:"pid"`
	Port      int       `bun:"client_port"`
	State     string    `bun:"state"`
	XactStart time.Time `bun:"xact_start"`
	Now       time.Time `bun:"now"`
}

func watchLocks(t *testing.T, url string) *lockWatcher {
	t.Helper()
	db := outboxtest.OpenURL(t, url, nil)
	ctx, cancel := context.WithCancel(context.Background())
	w := &lockWatcher{sessions: map[sessionKey]*sessionSeen{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			var samples []sessionSample
			err := db.NewRaw(`SELECT a.pid, coalesce(a.client_port, 0) AS client_port, coalesce(a.state, '') AS state,
  a.xact_start, clock_timestamp() AS now
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
  AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.granted AND l.relation IN ('outbox_events'::regclass, 'bunbox_stream'::regclass)
    AND l.mode IN ('RowShareLock', 'RowExclusiveLock'))`).Scan(ctx, &samples)
			if err == nil {
				w.mu.Lock()
				w.latest = samples
				for _, s := range samples {
					k := sessionKey{s.Pid, s.XactStart}
					seen := w.sessions[k]
					if seen == nil {
						seen = &sessionSeen{port: s.Port, xactStart: s.XactStart}
						w.sessions[k] = seen
					}
					seen.last = s.Now
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *lockWatcher) stop() {
	w.cancel()
	<-w.done
}

// holding returns the pids of the sessions through p that held a lock on outbox_events at the last sample.
func (w *lockWatcher) holding(p *netproxy.Proxy) []int {
	return w.latestWhere(func(s sessionSample) bool { return p.Upstream(s.Port) })
}

// idleHolding is holding, of the sessions idle in transaction.
func (w *lockWatcher) idleHolding(p *netproxy.Proxy) []int {
	return w.latestWhere(func(s sessionSample) bool {
		return p.Upstream(s.Port) && strings.HasPrefix(s.State, "idle in transaction")
	})
}

func (w *lockWatcher) latestWhere(f func(sessionSample) bool) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var pids []int
	for _, s := range w.latest {
		if f(s) {
			pids = append(pids, s.Pid)
		}
	}
	return pids
}

// longest is the longest time a session through one of ps held a lock on outbox_events: from the start
// of its transaction to the last sample that saw it.
func (w *lockWatcher) longest(ps ...*netproxy.Proxy) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var best time.Duration
	pid := 0
	for k, s := range w.sessions {
		if !slices.ContainsFunc(ps, func(p *netproxy.Proxy) bool { return p.Upstream(s.port) }) {
			continue
		}
		if d := s.last.Sub(s.xactStart); d > best {
			best, pid = d, k.pid
		}
	}
	return best, pid
}

func netSummary(rows []netRow, wall time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nnetwork fault summary (BUNBOX_TEST_DRIVER=%s, relay defaults: IdleInTransactionTimeout %s)\n",
		cmp.Or(os.Getenv("BUNBOX_TEST_DRIVER"), "pgdriver"), relay.Config{}.IdleInTransactionTimeout)
	fmt.Fprintf(&b, "| %-18s | %-6s | %-11s | %-4s | %-8s | %-8s | %-9s | %-14s | %-9s | %-5s | %s\n",
		"scenario", "events", "delivered", "lost", "dup eff.", "dup enq.", "conflicts", "pend/dead/lock", "max hold", "wall", "note")
	for _, r := range rows {
		status := ""
		if r.failed {
			status = " FAILED"
		}
		fmt.Fprintf(&b, "| %-18s | %-6d | %5d/%-5d | %-4d | %-8d | %-8d | %-9d | %4d/%d/%-6d | %8.1fs | %4.0fs | %s%s\n",
			r.name, r.committed, r.delivered, r.routed, r.lost, r.dupEffect, r.dupEnqueue, r.conflicts,
			r.pending, r.dead, r.locked, r.longestHold.Seconds(), r.wall.Seconds(), r.note, status)
	}
	fmt.Fprintf(&b, "network scenarios' wall time: %s\n", wall.Round(time.Second))
	return b.String()
}
