//go:build fault

package faultsuite

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

var (
	seedFlag  = flag.Int64("fault.seed", 0, "seed of the fault schedule (also FAULT_SEED); 0 means time-based")
	flowFlag  = flag.Duration("fault.flow", 0, "how long events flow while faults are injected (also FAULT_FLOW); default 90s")
	killsFlag = flag.Int("fault.kills", 0, "SIGKILLs of relays and workers (also FAULT_KILLS); default 30")
)

const (
	relays  = 3
	workers = 2
	// workerQuiet is how long before the end of the flow the last worker is killed: asynq hands the
	// tasks a killed worker held to another only after their lease expired (30 s) plus the recoverer's
	// 30 s margin, which bounds the drain.
	workerQuiet = 25 * time.Second
	drainMax    = 150 * time.Second
)

const appSchema = `
CREATE TABLE orders (
    id     uuid   PRIMARY KEY,
    tx_no  bigint NOT NULL,
    amount bigint NOT NULL
);
CREATE INDEX orders_tx_no_idx ON orders (tx_no);
-- The effect of a handled event, written in the inbox's transaction. No unique constraint on purpose:
-- a second effect of one event must show up as a duplicate row, not as an error.
CREATE TABLE fault_effects (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    effect_key text        NOT NULL, -- the task id: event id, or event id:listener for a fanned-out event
    event_id   uuid        NOT NULL,
    event_name text        NOT NULL,
    worker     text        NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT now()
);
-- The accounts of the keyed transactions: seq is the number of the account's last committed event,
-- handled_seq the last one a handler applied. A handler that finds handled_seq other than its event's
-- number minus one writes a violation.
CREATE TABLE fault_accounts (
    id          text   PRIMARY KEY,
    seq         bigint NOT NULL DEFAULT 0,
    handled_seq bigint NOT NULL DEFAULT 0
);
INSERT INTO fault_accounts (id) SELECT 'acct-' || i FROM generate_series(0, 7) i;
CREATE TABLE fault_order_violations (
    account     text   NOT NULL,
    seq         bigint NOT NULL,
    handled_seq bigint NOT NULL,
    worker      text   NOT NULL
);`

// fault is one entry of the schedule.
type fault struct {
	at   time.Duration
	kind string // "kill", "term", "redis", "postgres"
	proc *proc
}

// TestFault runs the suite; see the package doc. The definition of a duplicate enqueue is in
// countDuplicateEnqueues.
func TestFault(t *testing.T) {
	outboxtest.SkipShort(t)
	began := time.Now()
	seed := cmp.Or(*seedFlag, envInt64(t, "FAULT_SEED"), time.Now().UnixNano()%1_000_000_000)
	flow := cmp.Or(*flowFlag, envDuration(t, "FAULT_FLOW"), 90*time.Second)
	kills := int(cmp.Or(int64(*killsFlag), envInt64(t, "FAULT_KILLS"), 30))
	fmt.Printf("fault suite: FAULT_SEED=%d FAULT_FLOW=%s FAULT_KILLS=%d FAULT_STREAM=%t\n", seed, flow, kills, streamOn)
	t.Logf("FAULT_SEED=%d (replay with FAULT_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))

	dir := t.TempDir()
	if keep := os.Getenv("FAULT_DIR"); keep != "" { // ledgers and process logs kept for a post-mortem
		dir = keep
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildHelper(t, dir)
	pg := outboxtest.StartPostgres(t)
	rd := outboxtest.StartRedis(t, &outboxtest.RedisOptions{NoPersistence: true})
	db := pg.Schema(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, appSchema); err != nil {
		t.Fatalf("app schema: %v", err)
	}
	if err := relay.EnableNotifyTrigger(ctx, db, model.Location{}); err != nil {
		t.Fatalf("notify trigger: %v", err)
	}
	setStream(t, db)
	_ = db.Close() // the cluster restarts below; later checks open fresh pools

	base := []string{"-db", pg.URL(), "-redis", rd.Addr(), "-dir", dir}
	var relayProcs, workerProcs []*proc
	// FAULT_BREAK sabotages one safety mechanism, to prove that the ledger notices its absence: with
	// reconciler, inbox or taskid the suite must fail (lost events, duplicate effects, duplicate enqueues).
	sabotage := os.Getenv("FAULT_BREAK")
	if sabotage != "" {
		t.Logf("FAULT_BREAK=%s: this run is expected to FAIL", sabotage)
	}
	for i := range relays {
		id := fmt.Sprintf("r%d", i)
		relayProcs = append(relayProcs, newProc(t, dir, bin, id, append([]string{"relay", "-id", id, "-break", sabotage}, base...)...))
	}
	for i := range workers {
		id := fmt.Sprintf("w%d", i)
		workerProcs = append(workerProcs, newProc(t, dir, bin, id,
			append([]string{"worker", "-id", id, "-break", sabotage, "-seed", strconv.FormatInt(seed+int64(i), 10)}, base...)...))
	}
	producer := newProc(t, dir, bin, "producer", append([]string{"producer", "-id", "producer", "-break", sabotage,
		"-seed", strconv.FormatInt(seed, 10), "-duration", flow.String(), "-rate", "40"}, base...)...)
	all := append(append([]*proc{}, relayProcs...), workerProcs...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range append(all, producer) {
				t.Logf("--- last lines of %s:\n%s", p.name, p.tail(25))
			}
			t.Logf("ledgers and logs kept in %s until the test's TempDir is removed", dir)
		}
	})
	for _, p := range all {
		p.start(t)
	}
	producer.start(t)
	flowStart := time.Now()

	// The schedule: kills spread over the flow (workers only until workerQuiet before its end), one Redis
	// restart without persistence, one PostgreSQL crash.
	var schedule []fault
	for range kills {
		at := time.Duration(1_500+rng.Int64N(flow.Milliseconds()-2_500)) * time.Millisecond
		target := relayProcs[rng.IntN(relays)]
		if at < flow-workerQuiet && rng.IntN(2) == 0 {
			target = workerProcs[rng.IntN(workers)]
		}
		schedule = append(schedule, fault{at: at, kind: "kill", proc: target})
	}
	// Graceful restarts (SIGTERM, as in a deploy) of relays and workers, on top of the kills: a stopping
	// relay finishes or releases its batch, a stopping worker hands its tasks back.
	for range kills / 4 {
		at := time.Duration(1_500+rng.Int64N(flow.Milliseconds()-2_500)) * time.Millisecond
		target := all[rng.IntN(len(all))]
		schedule = append(schedule, fault{at: at, kind: "term", proc: target})
	}
	redisAt := time.Duration(float64(flow) * (0.25 + 0.1*rng.Float64()))
	pgAt := time.Duration(float64(flow) * (0.55 + 0.1*rng.Float64()))
	schedule = append(schedule, fault{at: redisAt, kind: "redis"}, fault{at: pgAt, kind: "postgres"})
	sort.Slice(schedule, func(i, j int) bool { return schedule[i].at < schedule[j].at })

	if dl, ok := t.Deadline(); ok && time.Until(dl) < flow+drainMax+time.Minute {
		t.Logf("warning: the test deadline (%s away) may be too close for the flow and the drain; use -timeout 15m",
			time.Until(dl).Round(time.Second))
	}
	var st stats
	for _, f := range schedule {
		if d := time.Until(flowStart.Add(f.at)); d > 0 {
			time.Sleep(d) // spreading the faults over the flow, not waiting for something
		}
		pause := time.Duration(rng.Int64N(400)) * time.Millisecond
		switch f.kind {
		case "kill":
			f.proc.kill(t)
			time.Sleep(pause) // down for a moment, as a supervisor restarts it
			f.proc.start(t)
			st.kills++
			if strings.HasPrefix(f.proc.name, "w") {
				st.workerKills++
			}
		case "term":
			f.proc.stop(t, 15*time.Second)
			f.proc.start(t)
			st.terms++
		case "redis":
			// The workers go down first, so that Redis holds a backlog of pending tasks when it loses
			// everything: without the reconciler these events would never be handled.
			for _, w := range workerProcs {
				w.kill(t)
				st.kills++
				st.workerKills++
			}
			time.Sleep(2 * time.Second) // the backlog builds up while the relays keep enqueueing
			rd.Stop(t)                  // no persistence: every task, pending or completed, is gone
			st.redisStopEnd = time.Now()
			time.Sleep(500*time.Millisecond + pause)
			st.redisStartBegin = time.Now()
			rd.Start(t)
			for _, w := range workerProcs {
				w.start(t)
			}
			t.Logf("%s: workers killed, Redis restarted empty, workers restarted", time.Since(flowStart).Round(time.Millisecond))
		case "postgres":
			pg.Crash(t) // pg_ctl stop -m immediate: like a power cut, WAL recovery at start
			time.Sleep(500*time.Millisecond + pause)
			pg.Start(t)
			t.Logf("%s: PostgreSQL crashed and restarted", time.Since(flowStart).Round(time.Millisecond))
		}
	}
	if !producer.wait(flow + time.Minute) {
		t.Fatalf("the producer did not finish")
	}
	t.Logf("%s: flow over, %d kills; draining", time.Since(flowStart).Round(time.Millisecond), st.kills)

	check := pg.Open(t, nil)
	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: rd.Addr()})
	defer ins.Close()
	led := readLedger(t, dir, check)
	bad := enqueueBadTasks(t, rd.Addr())

	// A go test -timeout that ends before the drain would panic, skipping the cleanups that stop the
	// servers: end the drain early instead, and fail.
	drainLimit := drainMax
	if dl, ok := t.Deadline(); ok {
		drainLimit = min(drainLimit, time.Until(dl)-30*time.Second)
	}
	// Drain: wait until nothing is pending, every routed event has its effect and every event's task is
	// in Redis (completed, or archived for the unrouted ones).
	drainStart := time.Now()
	var progress drainState
	for {
		progress = drain(ctx, check, ins, led, st.redisStartBegin)
		progress.badArchived = archivedUnretried(ins, bad)
		progress.bad = len(bad)
		if progress.done() {
			break
		}
		if time.Since(drainStart) > drainLimit {
			t.Errorf("not drained after %s: %s", drainLimit.Round(time.Second), progress)
			break
		}
		time.Sleep(time.Second) // a poll step
	}
	t.Logf("drained in %s: %s", time.Since(drainStart).Round(time.Millisecond), progress)

	locked := lockedRows(t, check)
	for _, p := range all {
		p.stop(t, 15*time.Second)
	}
	st.wall = time.Since(began)
	st.progress = progress
	res := verify(t, check, ins, dir, led, &st, locked)
	deaths := map[int]time.Time{}
	for _, w := range workerProcs {
		maps.Copy(deaths, w.deathTimes())
	}
	ord := checkOrdering(t, check, dir, deaths, led)
	summary := res.table(seed, &st) + ord.table()
	fmt.Print(summary) // stdout: shown with -v, and always when the test fails
	res.assert(t)
	ord.assert(t)
}

type stats struct {
	kills, workerKills, terms     int
	redisStopEnd, redisStartBegin time.Time
	wall                          time.Duration
	progress                      drainState
}

// txRecord is one producer transaction.
type txRecord struct {
	no      int64
	outcome string // committed, rolledback, failed
	shape   string
	events  []ledgerEvent
}

type ledgerEvent struct {
	id, name string
}

type ledger struct {
	txs                       []txRecord
	committed, rolledBack     int // transactions, after resolving the failed ones
	failedCommitted, failedRB int
	expected                  map[string]string // event id -> name, of committed transactions
	forbidden                 map[string]string // of rolled-back ones
}

// readLedger reads the producer's ledger and resolves transactions that failed with an error from
// PostgreSQL: they committed if and only if their orders exist.
func readLedger(t *testing.T, dir string, db *bun.DB) *ledger {
	t.Helper()
	l := &ledger{expected: map[string]string{}, forbidden: map[string]string{}}
	readLines(t, filepath.Join(dir, "producer.log"), func(_ string, f []string) {
		if f[0] != "tx" || len(f) < 5 {
			t.Fatalf("producer ledger: bad line %q", strings.Join(f, " "))
		}
		no, _ := strconv.ParseInt(f[1], 10, 64)
		rec := txRecord{no: no, outcome: f[2], shape: f[3]}
		for _, e := range strings.Split(f[4], ",") {
			id, name, _ := strings.Cut(e, ":")
			rec.events = append(rec.events, ledgerEvent{id, name})
		}
		l.txs = append(l.txs, rec)
	})
	if len(l.txs) == 0 {
		t.Fatal("the producer committed nothing")
	}
	var failed []int64
	for _, tx := range l.txs {
		if tx.outcome == "failed" {
			failed = append(failed, tx.no)
		}
	}
	present := map[int64]bool{}
	if len(failed) > 0 {
		var nos []int64
		err := retryQuery(func() error {
			return db.NewRaw("SELECT DISTINCT tx_no FROM orders WHERE tx_no IN (?)", bun.List(failed)).Scan(context.Background(), &nos)
		})
		if err != nil {
			t.Fatalf("resolve failed transactions: %v", err)
		}
		for _, n := range nos {
			present[n] = true
		}
	}
	for _, tx := range l.txs {
		committed := tx.outcome == "committed"
		switch tx.outcome {
		case "failed":
			committed = present[tx.no]
			if committed {
				l.failedCommitted++
			} else {
				l.failedRB++
			}
		case "committed", "rolledback":
		default:
			t.Fatalf("producer ledger: unknown outcome %q", tx.outcome)
		}
		target := l.forbidden
		if committed {
			l.committed++
			target = l.expected
		} else {
			l.rolledBack++
		}
		for _, e := range tx.events {
			target[e.id] = e.name
		}
	}
	return l
}

func retryQuery(f func() error) error {
	var err error
	for range 20 {
		if err = f(); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond) // a pool may hand out a connection broken by the crash
	}
	return err
}

type drainState struct {
	pending, dead       int
	routed, effected    int
	tasks, tasksInRedis int
	unrouted, archived  int
	bad, badArchived    int
	inFlight            int // tasks pending, active, scheduled or in retry
	keyedOpen           int // keyed rows the relays have not seen completed yet
	err                 error
}

func (d drainState) done() bool {
	return d.err == nil && d.pending == 0 && d.keyedOpen == 0 && d.effected == d.routed && d.tasksInRedis == d.tasks && d.archived == d.unrouted && d.badArchived == d.bad
}

func (d drainState) String() string {
	return fmt.Sprintf("pending %d, keyed not completed %d, dead %d, effects %d/%d, tasks in Redis %d/%d, unrouted archived %d/%d, malformed archived %d/%d, tasks in flight %d, err %v",
		d.pending, d.keyedOpen, d.dead, d.effected, d.routed, d.tasksInRedis, d.tasks, d.archived, d.unrouted, d.badArchived, d.bad, d.inFlight, d.err)
}

func drain(ctx context.Context, db *bun.DB, ins *asynq.Inspector, l *ledger, redisLoss time.Time) drainState {
	var d drainState
	d.err = db.NewRaw(`SELECT
  (SELECT count(*) FROM `+pendingFrom+` WHERE `+pendingWhere+`),
  (SELECT count(*) FROM outbox_events WHERE dead_at IS NOT NULL),
  (SELECT count(*) FROM outbox_events WHERE ordering_key IS NOT NULL AND completed_at IS NULL)`).Scan(ctx, &d.pending, &d.dead, &d.keyedOpen)
	if d.err != nil {
		return d
	}
	var effected []string
	if d.err = db.NewRaw("SELECT DISTINCT effect_key FROM fault_effects").Scan(ctx, &effected); d.err != nil {
		return d
	}
	have := make(map[string]bool, len(effected))
	for _, id := range effected {
		have[id] = true
	}
	for id, name := range l.expected {
		if name == "order.unrouted" {
			d.unrouted++
			d.tasks++
			continue
		}
		for _, key := range taskIDs(id, name) {
			d.tasks++
			d.routed++
			if have[key] {
				d.effected++
			}
		}
	}
	if d.pending > 0 || d.effected < d.routed {
		return d // look at Redis only once the database is done
	}
	// Tasks a killed worker held stay active until asynq's recoverer hands them out again (lease
	// expired + 30 s); their redelivery must find the inbox record, so the suite waits for them.
	for _, q := range []string{"default", "critical"} {
		qi, err := ins.GetQueueInfo(q)
		if err != nil {
			d.err = err
			return d
		}
		d.inFlight += qi.Pending + qi.Active + qi.Scheduled + qi.Retry + qi.Aggregating
	}
	var doneBefore map[string]bool
	if doneBefore, d.err = completedBefore(ctx, db, redisLoss); d.err != nil {
		return d
	}
	for id, name := range l.expected {
		for _, key := range taskIDs(id, name) {
			info, err := ins.GetTaskInfo(queueOf(name), key)
			switch {
			case err == nil, doneBefore[id]:
				d.tasksInRedis++
				if name == "order.unrouted" && info.State == asynq.TaskStateArchived {
					d.archived++
				}
			case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			default:
				d.err = err
				return d
			}
		}
	}
	return d
}

// enqueueBadTasks puts tasks into Redis that no relay would write, as a buggy or hostile producer might:
// the workers must archive each at its first delivery (asynq.SkipRetry), with no effect. It returns
// their task ids.
func enqueueBadTasks(t *testing.T, addr string) []string {
	t.Helper()
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	defer c.Close()
	tasks := map[string]*asynq.Task{
		"bad-no-header":   asynq.NewTask("order.placed", []byte(`{}`)),
		"bad-header":      asynq.NewTaskWithHeaders("order.placed", []byte(`{}`), map[string]string{"bunbox-event-id": "not-a-uuid"}),
		"bad-nil-id":      asynq.NewTaskWithHeaders("order.audited", []byte(`{}`), map[string]string{"bunbox-event-id": "00000000-0000-0000-0000-000000000000"}),
		"bad-no-listener": asynq.NewTask("order.nobody-listens", []byte(`not json`)),
	}
	var ids []string
	for id, task := range tasks {
		if _, err := c.Enqueue(task, asynq.TaskID(id), asynq.Queue("default"), asynq.MaxRetry(5)); err != nil {
			t.Fatalf("enqueue %s: %v", id, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// archivedUnretried counts the tasks that are archived without a single retry.
func archivedUnretried(ins *asynq.Inspector, ids []string) int {
	n := 0
	for _, id := range ids {
		if info, err := ins.GetTaskInfo("default", id); err == nil && info.State == asynq.TaskStateArchived && info.Retried == 0 {
			n++
		}
	}
	return n
}

// listeners mirrors faultproc.Routes: order.audited fans out to two listeners, each its own task
// ("<event id>:<listener>") and its own inbox record.
var listeners = map[string][]string{"order.audited": {"ledger", "notify"}}

// taskIDs are the ids of the tasks the relay makes for an event, which are also its effect keys.
func taskIDs(id, name string) []string {
	ls := listeners[name]
	if len(ls) == 0 {
		return []string{id}
	}
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = id + ":" + l
	}
	return ids
}

// eventOf is the event id of a task id.
func eventOf(taskID string) string {
	id, _, _ := strings.Cut(taskID, ":")
	return id
}

func queueOf(name string) string {
	if name == "order.audited" {
		return "critical"
	}
	return "default"
}

// lockedRows counts the outbox rows some session holds a lock on, with relays still running and
// nothing pending: a relay killed mid-batch must not leave locks behind.
func lockedRows(t *testing.T, db *bun.DB) int {
	t.Helper()
	var total, free int
	err := retryQuery(func() error {
		return db.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
			if err := tx.NewRaw("SELECT count(*) FROM outbox_events").Scan(ctx, &total); err != nil {
				return err
			}
			return tx.NewRaw("SELECT count(*) FROM (SELECT id FROM outbox_events FOR UPDATE SKIP LOCKED) s").Scan(ctx, &free)
		})
	})
	if err != nil {
		t.Fatalf("count locked rows: %v", err)
	}
	return total - free
}

type result struct {
	st                      *stats
	l                       *ledger
	routed, unrouted        int
	byName                  map[string]int
	delivered               int // routed events with an effect
	archived                int // unrouted events archived in Redis
	rawDeliveries           int
	distinctDelivered       int // task ids delivered at least once
	cutHandlers             int // handlers a SIGKILL interrupted
	deliveredForbidden      int
	effectRows, dupEffects  int
	unexpectedEffects       int
	inboxRows               int
	okEnqueues, conflicts   int
	dupEnqueues, ambiguous  int
	reenqueuedAfterLoss     int
	reconcilerRequeued      int // rows the reconcilers requeued
	rowsLostWithRedis       int // rows with a task created before the Redis restart
	enqueuedForbidden       int
	outboxRows, outboxExtra int
	outboxForbidden         int
	pending, dead, locked   int
	lost                    []string
	tasksMissing            int
	keyedDoneBeforeLoss     int // keyed events seen completed before Redis lost their tasks: not delivered again
	lanes                   int // the stream's lane cursor rows at the end (0 with the stream off)
	enqueuesByRelay         map[string]int
}

func verify(t *testing.T, db *bun.DB, ins *asynq.Inspector, dir string, l *ledger, st *stats, locked int) *result {
	t.Helper()
	ctx := context.Background()
	r := &result{l: l, st: st, byName: map[string]int{}, locked: locked, enqueuesByRelay: map[string]int{}}
	if err := db.NewRaw("SELECT count(*) FROM bunbox_stream WHERE queue IS NOT NULL").Scan(ctx, &r.lanes); err != nil {
		t.Fatalf("count the stream's lanes: %v", err)
	}
	routedKeys := map[string]bool{}
	for id, name := range l.expected {
		r.byName[name]++
		if name == "order.unrouted" {
			r.unrouted++
			continue
		}
		for _, key := range taskIDs(id, name) {
			routedKeys[key] = true
			r.routed++
		}
	}

	// Effects: once per task of a routed committed event (per listener when it fans out), never for
	// anything else.
	type effectRow struct {
		Key string `bun:"effect_key"`
		N   int    `bun:"n"`
	}
	var effects []effectRow
	must(t, db.NewRaw("SELECT effect_key, count(*) AS n FROM fault_effects GROUP BY effect_key").Scan(ctx, &effects))
	effectCount := map[string]int{}
	for _, e := range effects {
		effectCount[e.Key] = e.N
		r.effectRows += e.N
		r.dupEffects += e.N - 1
		if !routedKeys[e.Key] {
			r.unexpectedEffects++
		}
	}
	must(t, db.NewRaw("SELECT count(*) FROM inbox_events").Scan(ctx, &r.inboxRows))
	doneBefore, err := completedBefore(ctx, db, st.redisStartBegin)
	must(t, err)
	r.keyedDoneBeforeLoss = len(doneBefore)
	for id, name := range l.expected {
		if name == "order.unrouted" {
			info, err := ins.GetTaskInfo("default", id)
			if err == nil && info.State == asynq.TaskStateArchived {
				r.archived++
			} else {
				r.lost = append(r.lost, id)
			}
			continue
		}
		for _, key := range taskIDs(id, name) {
			if effectCount[key] > 0 {
				r.delivered++
			} else {
				r.lost = append(r.lost, key)
			}
			if _, err := ins.GetTaskInfo(queueOf(name), key); err != nil && !doneBefore[id] {
				r.tasksMissing++
			}
		}
	}
	sort.Strings(r.lost)

	// The outbox holds exactly the events of committed transactions.
	var outboxIDs []string
	must(t, db.NewRaw("SELECT event_id::text FROM outbox_events").Scan(ctx, &outboxIDs))
	r.outboxRows = len(outboxIDs)
	for _, id := range outboxIDs {
		if _, ok := l.expected[id]; !ok {
			r.outboxExtra++
		}
		if _, ok := l.forbidden[id]; ok {
			r.outboxForbidden++
		}
	}
	must(t, db.NewRaw(`SELECT
  (SELECT count(*) FROM `+pendingFrom+` WHERE `+pendingWhere+`),
  (SELECT count(*) FROM outbox_events WHERE dead_at IS NOT NULL)`).Scan(ctx, &r.pending, &r.dead))

	// Raw deliveries, counted outside the handlers' transactions.
	seen := map[string]bool{}
	open := map[string]int{} // event id + pid -> handlers started and not returned
	readLines(t, filepath.Join(dir, "deliveries-*.log"), func(_ string, f []string) {
		if f[0] == "ks" || f[0] == "ke" {
			return // keyed runs: see checkOrdering
		}
		if f[0] == "e" {
			open[f[1]+"/"+f[4]]--
			return
		}
		open[f[1]+"/"+f[4]]++
		r.rawDeliveries++
		if !seen[f[1]] {
			seen[f[1]] = true
			r.distinctDelivered++
		}
		if _, ok := l.forbidden[eventOf(f[1])]; ok {
			r.deliveredForbidden++
		}
	})

	for _, n := range open {
		r.cutHandlers += max(n, 0)
	}

	// Enqueues.
	enq := map[string][]span{}
	lostRows := map[string]bool{}
	readLines(t, filepath.Join(dir, "enqueue-*.log"), func(file string, f []string) {
		if _, ok := l.forbidden[eventOf(f[1])]; ok {
			r.enqueuedForbidden++
		}
		if start, _ := strconv.ParseInt(f[2], 10, 64); !st.redisStopEnd.IsZero() && !time.Unix(0, start).After(st.redisStopEnd) {
			lostRows[eventOf(f[1])] = true // a task existed before the restart: Redis could lose it
		}
		if f[0] == "conflict" {
			r.conflicts++
			return
		}
		r.okEnqueues++
		r.enqueuesByRelay[strings.TrimSuffix(strings.TrimPrefix(file, "enqueue-"), ".log")]++
		s, _ := strconv.ParseInt(f[2], 10, 64)
		e, _ := strconv.ParseInt(f[3], 10, 64)
		enq[f[1]] = append(enq[f[1]], span{time.Unix(0, s), time.Unix(0, e)})
	})
	r.dupEnqueues, r.ambiguous, r.reenqueuedAfterLoss = countDuplicateEnqueues(enq, st.redisStopEnd, st.redisStartBegin)

	// Rows the reconcilers requeued, from their logs, against the rows Redis could have lost: those with
	// a task created before the restart. A reconciler that takes existing tasks for lost requeues more.
	r.rowsLostWithRedis = len(lostRows)
	readLines(t, filepath.Join(dir, "r*.out"), func(_ string, f []string) {
		line := strings.Join(f, " ")
		if !strings.Contains(line, "bunbox reconciler") {
			return
		}
		for _, field := range f {
			if v, ok := strings.CutPrefix(field, "requeued="); ok {
				n, _ := strconv.Atoi(v)
				r.reconcilerRequeued += n
			}
		}
	})
	return r
}

type span struct{ start, end time.Time }

// countDuplicateEnqueues counts the enqueues that created a task although an earlier task of the same
// event id still existed in Redis: that is what "enqueued twice inside the dedupe window" means here.
//
// asynq's enqueue with a TaskID is atomic (a Lua script refuses an id that exists), and the suite's
// dedupe window (TaskRetention, 1h) outlasts the run, so inside one Redis incarnation a task, once
// created, exists until the end (pending, active, retry, archived or completed). A second successful
// enqueue of an id inside one incarnation is therefore a duplicate. Across the Redis restart without
// persistence it is not: the earlier task is gone with the data, and the reconciler's re-enqueue is
// the recovery the suite demands. Conflicts (the task existed) are never duplicates: they are the
// dedupe working.
//
// Each successful enqueue is placed in an incarnation by the wall-clock span of the call, recorded by
// the relay process: a call that ended before the new server started ran on the old one; a call that
// started after the old server exited ran on the new one; a call spanning the whole outage is ambiguous
// and is placed where it makes no duplicate (and counted, to keep the rule honest). An enqueue whose
// process was killed before it wrote its ledger line is missed; it can only hide a duplicate, never
// invent one.
func countDuplicateEnqueues(enq map[string][]span, stopEnd, startBegin time.Time) (dups, ambiguous, reenqueued int) {
	for _, spans := range enq {
		var perEpoch [2]int
		amb := 0
		for _, s := range spans {
			switch {
			case stopEnd.IsZero(), s.end.Before(startBegin):
				perEpoch[0]++
			case s.start.After(stopEnd):
				perEpoch[1]++
			default:
				amb++
			}
		}
		ambiguous += amb
		for ; amb > 0; amb-- { // fill an empty incarnation first
			if perEpoch[0] == 0 {
				perEpoch[0]++
			} else {
				perEpoch[1]++
			}
		}
		for _, n := range perEpoch {
			dups += max(0, n-1)
		}
		if perEpoch[0] > 0 && perEpoch[1] > 0 {
			reenqueued++
		}
	}
	return dups, ambiguous, reenqueued
}

func (r *result) assert(t *testing.T) {
	t.Helper()
	fail := func(n int, what string) {
		if n != 0 {
			t.Errorf("%s: %d", what, n)
		}
	}
	if len(r.lost) > 0 {
		show := r.lost[:min(10, len(r.lost))]
		t.Errorf("lost %d tasks of events of committed transactions, e.g. %v", len(r.lost), show)
	}
	fail(r.dupEffects, "duplicate effects")
	if r.reconcilerRequeued > r.rowsLostWithRedis {
		t.Errorf("the reconcilers requeued %d rows, but only %d rows had a task Redis could have lost: they took existing tasks for lost",
			r.reconcilerRequeued, r.rowsLostWithRedis)
	}
	fail(r.unexpectedEffects, "effects of events that were rolled back or have no handler")
	fail(r.dupEnqueues, "tasks enqueued twice inside the dedupe window")
	fail(r.outboxForbidden, "outbox rows of rolled-back transactions")
	fail(r.outboxExtra, "outbox rows no committed transaction wrote")
	fail(r.enqueuedForbidden, "enqueues of rolled-back events")
	fail(r.deliveredForbidden, "deliveries of rolled-back events")
	fail(r.pending, "rows left pending")
	fail(r.dead, "dead rows")
	fail(r.locked, "rows left locked")
	fail(r.tasksMissing, "tasks of committed events missing from Redis at the end")
	if r.outboxRows != len(r.l.expected) {
		t.Errorf("outbox rows %d, events of committed transactions %d", r.outboxRows, len(r.l.expected))
	}
	if r.inboxRows != r.delivered {
		t.Errorf("inbox rows %d, handled tasks %d", r.inboxRows, r.delivered)
	}
	if st := r.st; st.progress.badArchived != st.progress.bad {
		t.Errorf("malformed tasks archived without retry: %d of %d", st.progress.badArchived, st.progress.bad)
	}
}

// byRelay lists the counts of n by relay id, in order of id.
func byRelay(n map[string]int) string {
	ids := slices.Sorted(maps.Keys(n))
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s %d", id, n[id])
	}
	return strings.Join(parts, ", ")
}

func (r *result) table(seed int64, st *stats) string {
	var b strings.Builder
	row := func(k, format string, args ...any) {
		fmt.Fprintf(&b, "| %-28s | %-72s |\n", k, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, "\nfault suite summary (FAULT_SEED=%d)\n", seed)
	row("measure", "value")
	row("----------------------------", "%s", strings.Repeat("-", 72))
	row("transactions", "%d committed, %d rolled back (%d failed by the crash: %d had committed)",
		r.l.committed, r.l.rolledBack, r.l.failedCommitted+r.l.failedRB, r.l.failedCommitted)
	row("events committed", "%d (placed %d, audited %d, unrouted %d, account.changed %d keyed)", len(r.l.expected),
		r.byName["order.placed"], r.byName["order.audited"], r.byName["order.unrouted"], r.byName["account.changed"])
	row("events rolled back", "%d (in outbox %d, enqueued %d, delivered %d)", len(r.l.forbidden),
		r.outboxForbidden, r.enqueuedForbidden, r.deliveredForbidden)
	row("delivered", "%d of %d routed tasks handled (audited: 2 listeners); %d of %d unrouted archived",
		r.delivered, r.routed, r.archived, r.unrouted)
	row("malformed tasks", "%d of %d archived at the first delivery, no retry, no effect", st.progress.badArchived, st.progress.bad)
	row("raw deliveries", "%d (%d redeliveries absorbed by the inbox)", r.rawDeliveries, r.rawDeliveries-r.distinctDelivered)
	row("handlers cut by SIGKILL", "%d (redelivered after the lease expired, or by the reconciler)", r.cutHandlers)
	row("enqueues", "%d created, %d conflicts (deduplicated)", r.okEnqueues, r.conflicts)
	row("stream lanes, by relay", "%d lanes; tasks created by each relay: %s", r.lanes, byRelay(r.enqueuesByRelay))
	row("re-enqueued after Redis loss", "%d tasks; reconcilers requeued %d rows of %d that had a task before",
		r.reenqueuedAfterLoss, r.reconcilerRequeued, r.rowsLostWithRedis)
	row("duplicate enqueues", "%d (ambiguous spans %d)", r.dupEnqueues, r.ambiguous)
	row("duplicate effects", "%d", r.dupEffects)
	row("lost", "%d tasks (missing from Redis at the end: %d)", len(r.lost), r.tasksMissing)
	row("keyed done before Redis loss", "%d (seen completed before their tasks were lost: not delivered again, by design)", r.keyedDoneBeforeLoss)
	row("left pending / dead / locked", "%d / %d / %d", r.pending, r.dead, r.locked)
	row("kills (SIGKILL)", "%d (relays %d, workers %d)", st.kills, st.kills-st.workerKills, st.workerKills)
	row("graceful restarts (SIGTERM)", "%d", st.terms)
	row("restarts", "Redis 1 (no persistence, all data lost), PostgreSQL 1 (immediate)")
	row("wall time", "%s", st.wall.Round(time.Second))
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func envInt64(t *testing.T, name string) int64 {
	s := os.Getenv(name)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q is not an integer", name, s)
	}
	return n
}

func envDuration(t *testing.T, name string) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%q is not a duration", name, s)
	}
	return d
}
