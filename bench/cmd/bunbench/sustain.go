package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
)

// The flat-at-scale parts (issue 18 item 3).
//
// sustain: writers commit events at a steady rate (-sustain-batch events per transaction; 1, the default,
// is a service that records one event per business transaction) while the relay, in a process of its own at its default
// Config (cleanup on, PublishedRetention 7 days, reconciler on, TaskRetention 24 h), forwards them to
// asynq. -sustain-retention sets its PublishedRetention, so that cleanup deletes rows during the run.
// Without -sustain-consume nothing consumes the queue: its tasks stay pending in Redis for the run
// (deleting them would make the reconciler requeue their rows). With it, an asynq server with a no-op
// handler drains the queue (sustainconsume.go), and the relay's TaskRetention is 2 minutes unless
// -sustain-task-retention says otherwise: Redis then holds about 2 minutes of completed tasks, and the
// reconciler's Window (half of it, 1 minute) only looks at rows whose completed tasks are still kept.
// Every interval prints one row of what should stay flat.
//
// keptdrain: the same drain of a backlog with 10 M published rows kept in the table and with none,
// rounds alternating, and the ratio of the medians.

// sustainSnap is what the sustain part reads at the end of each interval.
type sustainSnap struct {
	at         time.Time
	written    int64 // events committed by the writers
	missed     int64 // events the pacer could not hand to a writer within a second
	maxID      int64 // the table's largest id
	pending    int64 // rows not yet published
	inRedis    int64 // tasks in the queue's pending list
	processed  int64 // tasks asynq's server processed (asynq:{q}:processed)
	rows       int64 // count(*) of outbox_events
	relay      relayStats
	lsn        string // pg_current_wal_lsn()
	tableBytes int64
	indexes    []indexSize
	dead, live int64
	avN, anN   int     // autovacuums and autoanalyzes of the table that ended in the interval
	avSec      float64 // their elapsed time, from the server log
	avCount    int64   // pg_stat_user_tables.autovacuum_count
	redisMB    float64
	load       string
	cpu        sustainCPU
	smallDead  int64 // n_dead_tup of bunbox's small tables: the cursors' (bunbox_stream, bunbox_stream_positions' partitions) and the leases'
	positions  int64 // rows in bunbox_stream_positions: one per cursor move since the last rotation
	holding    bool  // a transaction held the xmin horizon at the end of the interval (-sustain-hold-xmin)
}

type indexSize struct {
	name    string
	bytes   int64
	pending bool // a partial index of pending rows (its predicate holds published_at IS NULL)
}

// sustainArms are the relays the sustain and keptdrain parts run, each on an outbox of its own: today's
// relay with its zero Config on a freshly migrated outbox (the stream on, as the migrations leave it), and the
// same relay on an outbox where relay.DisableStream was called before any row (the per-row path).
var sustainArms = []struct {
	name   string
	stream bool
}{{"bunbox relay", true}, {"bunbox per-row", false}}

// runSustain is the sustain part: each arm of sustainArms that -arms names (both when it names none), one
// after the other.
func runSustain(ctx context.Context, e *env, o options) error {
	ran := false
	for _, a := range sustainArms {
		if !o.want(a.name) {
			continue
		}
		ran = true
		if err := sustainArm(ctx, e, o, a.name, a.stream); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	if !ran {
		return fmt.Errorf("-arms %q names no arm of this part (bunbox relay, bunbox per-row)", o.arms)
	}
	return nil
}

// sustainArm is the sustain part for one relay: with stream the outbox keeps the stream on (the default),
// without it relay.DisableStream turns it off before the writers start.
func sustainArm(ctx context.Context, e *env, o options, name string, stream bool) error {
	rewrite := "on"
	if !o.aofRewrite {
		rewrite = "off for the run"
	}
	relayEnv, relayConf := sustainRelayEnv(o)
	consume := "nothing consumes the queue"
	if o.sustainConsume {
		consume = fmt.Sprintf("%d asynq servers (Concurrency %d each, a no-op handler) in a process of their own drain the queue", o.sustainConsumeServers, o.sustainConsumers)
	}
	fmt.Printf("## Flat at scale, %s: %d events/s for %s, %d writers, %d events per transaction, a row per %s, Redis's automatic AOF rewrite %s, the relay's Config %s, %s (load average %s)\n\n",
		name, o.sustainRate, o.sustainDur, o.sustainWriters, max(1, o.sustainBatch), o.sustainEvery, rewrite, relayConf, consume, loadAverage())
	db, schema, err := e.schema(ctx, o.sustainWriters+4, true)
	if err != nil {
		return err
	}
	// Every autovacuum of the table is logged, with its elapsed time: a storage parameter of this table
	// alone, the server's settings are left as they are.
	if _, err := db.ExecContext(ctx, "ALTER TABLE outbox_events SET (log_autovacuum_min_duration = 0)"); err != nil {
		return err
	}
	if stream {
		err = streamOn(ctx, db)
	} else {
		err = disableStream(ctx, db)
	}
	if err != nil {
		return err
	}
	avlog, err := openAutovacuumLog(ctx, e, o.pgLog, schema)
	if err != nil {
		fmt.Printf("(autovacuum time not measured: %v)\n", err)
	}
	q := e.queue("sustain")
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr})
	defer rdb.Close()
	defer dropBigQueue(rdb, q)
	restore, err := setAOFRewrite(ctx, rdb, o.aofRewrite)
	if err != nil {
		return err
	}
	defer restore()

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	proc := exec.CommandContext(ctx, exe, childRelayCommand, schema, "0") // relay.Config{}: every default, unless OUTBOX_* are set
	proc.Env = append(os.Environ(), relayEnv...)
	dieWithParent(proc)
	proc.Stderr = os.Stderr
	out, err := proc.StdoutPipe()
	if err != nil {
		return err
	}
	in, err := proc.StdinPipe()
	if err != nil {
		return err
	}
	if err := proc.Start(); err != nil {
		return err
	}
	defer func() { _ = in.Close(); _ = proc.Process.Signal(os.Interrupt); _ = proc.Wait() }()
	asker := &relayAsker{in: in, out: bufio.NewReader(out)}
	if line, err := asker.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "running" {
		return fmt.Errorf("the relay's process did not start: %q %v", line, err)
	}
	var cons *consumer
	if o.sustainConsume {
		if cons, err = startConsumer(ctx, q, o.sustainConsumeServers, o.sustainConsumers); err != nil {
			return err
		}
		defer cons.stop()
	}
	cpu := newCPUSampler(newMeter(ctx, db, e.redis.Addr), proc.Process.Pid, rdb)
	if cons != nil {
		cpu.consumer = cons.proc.Process.Pid
	}
	forksCtx, stopForks := context.WithCancel(ctx)
	defer stopForks()
	go cpu.watchForks(forksCtx)

	var written, missed atomic.Int64
	runCtx, stop := context.WithTimeout(ctx, o.sustainDur)
	defer stop()
	var wg sync.WaitGroup
	var holding atomic.Bool
	holdErr := make(chan error, 1)
	if o.holdXmin > 0 {
		fmt.Printf("A transaction (%s) holds the xmin horizon from %s to %s after the writers start.\n\n",
			map[bool]string{true: "with a transaction id", false: "a snapshot only"}[o.holdXid], o.holdAfter, o.holdAfter+o.holdXmin)
		wg.Go(func() { holdErr <- holdXmin(runCtx, db, o, &holding) })
	}
	errs := make(chan error, o.sustainWriters)
	batch := max(1, o.sustainBatch)
	tokens := make(chan int64, max(1, o.sustainRate/batch)) // at most a second of transactions waiting for a writer
	wg.Go(func() { pace(runCtx, float64(o.sustainRate)/float64(batch), tokens, &missed) })
	ob := bunx.New(db)
	for range o.sustainWriters {
		wg.Go(func() {
			evs := make([]*model.Event, batch)
			for n := range tokens {
				var err error
				for i := range evs {
					id := n*int64(batch) + int64(i)
					if evs[i], err = model.NewEvent("bench.sustain", orderPlaced{OrderID: id, Ref: fmt.Sprintf("ord-%012d", id)}, model.WithQueue(q)); err != nil {
						break
					}
				}
				if err == nil {
					err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return ob.Record(ctx, tx, evs...) })
				}
				if err != nil {
					errs <- err
					stop()
					return
				}
				written.Add(int64(batch))
			}
		})
	}

	snap := func() (sustainSnap, error) {
		s := sustainSnap{at: time.Now(), written: written.Load(), missed: missed.Load(), load: loadAverage(), cpu: cpu.read(ctx),
			holding: holding.Load()}
		if err := db.NewRaw(`SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
WHERE relid IN (to_regclass('bunbox_stream'), to_regclass('bunbox_leases'))
   OR relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass('bunbox_stream_positions'))`).Scan(ctx, &s.smallDead); err != nil {
			return s, err
		}
		if err := db.NewRaw(`SELECT count(*) FROM bunbox_stream_positions`).
			Scan(ctx, &s.positions); err != nil {
			return s, err
		}
		var err error
		if s.relay, err = asker.ask(); err != nil {
			return s, err
		}
		if err := db.NewRaw("SELECT count(*) FROM outbox_events").Scan(ctx, &s.rows); err != nil {
			return s, err
		}
		// With jit off (withoutJIT): compiling the count took seconds of the server's CPU each minute, under
		// the relay being measured.
		if err := withoutJIT(ctx, db, func(tx bun.Tx) error {
			return tx.NewRaw(`SELECT (SELECT coalesce(max(id), 0) FROM outbox_events),
  (SELECT count(*) FROM outbox_events WHERE published_at IS NULL AND dead_at IS NULL) + (`+streamWaitingSQL(q)+`),
  pg_current_wal_lsn()::text, pg_relation_size('outbox_events'),
  n_dead_tup, n_live_tup, autovacuum_count FROM pg_stat_user_tables WHERE relid = 'outbox_events'::regclass`).
				Scan(ctx, &s.maxID, &s.pending, &s.lsn, &s.tableBytes, &s.dead, &s.live, &s.avCount)
		}); err != nil {
			return s, err
		}
		rows, err := db.QueryContext(ctx, `SELECT c.relname, pg_relation_size(i.indexrelid),
  coalesce(pg_get_expr(i.indpred, i.indrelid) LIKE '%published_at IS NULL%', false)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'outbox_events'::regclass ORDER BY c.relname`)
		if err != nil {
			return s, err
		}
		for rows.Next() {
			var ix indexSize
			if err := rows.Scan(&ix.name, &ix.bytes, &ix.pending); err != nil {
				_ = rows.Close()
				return s, err
			}
			s.indexes = append(s.indexes, ix)
		}
		if err := rows.Close(); err != nil {
			return s, err
		}
		s.inRedis, _ = rdb.LLen(ctx, "asynq:{"+q+"}:pending").Result()
		s.processed, _ = rdb.Get(ctx, "asynq:{"+q+"}:processed").Int64()
		if info, err := rdb.Info(ctx, "memory").Result(); err == nil {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
					b, _ := strconv.ParseFloat(v, 64)
					s.redisMB = b / (1 << 20)
				}
			}
		}
		s.avN = -1
		if avlog != nil {
			s.avN, s.anN, s.avSec = avlog.read()
		}
		return s, nil
	}

	prev, err := snap()
	if err != nil {
		return err
	}
	start, first := prev.at, prev
	var rows [][]string
	var snaps []sustainSnap
	tick := time.NewTicker(o.sustainEvery)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return fmt.Errorf("a writer: %w", err)
		case <-runCtx.Done():
			done = true
		case <-tick.C:
		}
		if done && time.Since(prev.at) < o.sustainEvery/10 {
			break // the ticker's last row and the end coincide
		}
		s, err := snap()
		if err != nil {
			return err
		}
		var consumed map[string]int64
		if cons != nil {
			consumed = cons.take()
		}
		row, err := sustainRow(ctx, db, rdb, q, stream, prev, s, start, consumed)
		if err != nil {
			return err
		}
		fmt.Println("| " + strings.Join(row, " | ") + " |")
		rows, snaps, prev = append(rows, row), append(snaps, s), s
	}
	stop()
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("a writer: %w", err)
	case err := <-holdErr:
		if err != nil {
			return fmt.Errorf("the transaction holding xmin: %w", err)
		}
	default:
	}
	// The backlog left when the writers stop, and how long the relay takes to drain it.
	t0 := time.Now()
	var left int64
	for {
		if err := withoutJIT(ctx, db, func(tx bun.Tx) error {
			return tx.NewRaw("SELECT (SELECT count(*) FROM outbox_events WHERE published_at IS NULL AND dead_at IS NULL) + ("+streamWaitingSQL(q)+")").Scan(ctx, &left)
		}); err != nil {
			return err
		}
		if left == 0 || time.Since(t0) > 2*time.Minute {
			break
		}
		time.Sleep(100 * time.Millisecond) // the poll step of the wait
	}
	fmt.Println()
	table(sustainHeader, rows)
	last := prev
	fmt.Printf("\nThe relay's process: %d rows delivered to asynq (relay.Stats().Published), %d rows deleted by cleanup; its reconciler made %d passes (%d failed), "+
		"looked up %d rows' tasks, found %d missing and requeued %d.\n",
		last.relay.published, last.relay.cleaned, last.relay.passes, last.relay.failedPasses, last.relay.checked, last.relay.missing, last.relay.requeued)
	fmt.Printf("\n%d events written in %s (%.0f/s, %d transactions the pacer could not hand to a writer); backlog at the end %d rows, "+
		"%d after %s; table + indexes grew %.0f bytes per event written.\n",
		last.written-first.written, last.at.Sub(first.at).Round(time.Second), float64(last.written-first.written)/last.at.Sub(first.at).Seconds(),
		last.missed, last.pending, left, time.Since(t0).Round(100*time.Millisecond),
		float64(totalBytes(last)-totalBytes(first))/float64(max(1, last.written-first.written)))
	fmt.Println("\nEach index's size, MB, at the end of each interval:")
	fmt.Println()
	header := []string{"index"}
	for _, s := range snaps {
		header = append(header, fmtElapsed(s.at.Sub(start)))
	}
	var ixRows [][]string
	for i, ix := range first.indexes {
		r := []string{ix.name}
		if ix.pending {
			r[0] += " (pending, partial)"
		}
		for _, s := range snaps {
			if i < len(s.indexes) {
				r = append(r, fmt.Sprintf("%.2f", float64(s.indexes[i].bytes)/(1<<20)))
			}
		}
		ixRows = append(ixRows, r)
	}
	table(header, ixRows)
	fmt.Println(`
written/s: events committed per second by the writers (-sustain-batch events per transaction, paced by a ticker);
in Redis/s: tasks that reached the queue per second (its pending list's growth plus the tasks asynq's server processed,
asynq:{q}:processed); consumed/s: those processed (-sustain-consume; 0 without); backlog: rows not yet
published at the end of the interval (pending rows, and streamed rows the cursor has not passed); created→claimed:
published_at − created_at of every 50th row written in the interval (created_at is the producer's transaction
start, published_at the relay's claim transaction's now(), so it is commit → claimed, a lower bound of commit →
in Redis; a streamed row has no such time); created→in Redis: the same rows' task's pending_since (asynq's
client clock when it enqueued the task, on this machine) − created_at (asynq drops pending_since when a worker takes
the task: with a consumer, only the tasks still pending are measured); created→handler: the time the consumer's
handler ran − created_at, of the tasks whose id ends in "00" handled in the interval (about 1 in 256); claim: relay/claim.go's claim of 500,
timed alone 21 times in a transaction rolled back, median (with the stream on: the stream round's read of 500
after the cursor, the same way); sizes: pg_relation_size of the table (main fork) and
of each index; WAL: pg_current_wal_lsn() difference over the events written in the interval (the server is
this run's alone); autovacuum: the automatic vacuums of outbox_events that ended in the interval and the sum of
their elapsed time, from the server log (log_autovacuum_min_duration = 0 on the table); dead tuples:
pg_stat_user_tables.n_dead_tup (of outbox_events; then of bunbox_stream, bunbox_stream_positions' partitions and bunbox_leases together); cursor positions rows:
count(*) of bunbox_stream_positions (the relay rotates its two partitions); rows in table:
count(*) of outbox_events at the end of the interval; cleanup deleted: the rows the relay's cleanup deleted in the
interval (relay.Stats().Cleaned, asked of its process); reconciler: its passes that ended in the interval, the rows
whose tasks they looked up in Redis, and the rows they requeued (ReconcilerConfig.OnPass); xmin held: whether
the transaction of -sustain-hold-xmin was open at the end of the interval; load avg: /proc/loadavg at the end of the interval (the machine is shared).`)
	fmt.Printf(cpuNote+"\n", gomaxprocs())
	return nil
}

// sustainHeader heads sustainRow's columns.
var sustainHeader = []string{"elapsed", "written/s", "in Redis/s", "consumed/s", "backlog rows", "created→claimed p50 / p99 ms",
	"created→in Redis p50 / p99 ms", "created→handler p50 / p99 ms", "claim (stream: read) ms", "table MB", "indexes MB", "pending indexes kB", "WAL B/event",
	"rows in table", "cleanup deleted", "autovacuum n / s", "dead tuples", "cursor + leases dead tuples", "cursor positions rows", "xmin held",
	"reconciler passes / looked up / requeued", "Redis MB", "load avg", cpuHeader[0], cpuHeader[1]}

// sustainRow is the printed row of the interval from a to b.
func sustainRow(ctx context.Context, db *bun.DB, rdb *redis.Client, q string, stream bool, a, b sustainSnap, start time.Time, consumed map[string]int64) ([]string, error) {
	secs := b.at.Sub(a.at).Seconds()
	events := b.written - a.written
	var p50, p99 float64
	var sampled, published int
	var created []float64 // unix ns
	var ids []string
	if b.maxID > a.maxID {
		if err := db.NewRaw(`SELECT count(*), count(ms), coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0),
  coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0)
FROM (SELECT CASE WHEN published_at <> 'infinity' THEN extract(epoch FROM published_at - created_at) * 1000 END AS ms
  FROM outbox_events WHERE id = ANY(ARRAY(SELECT generate_series(?::bigint, ?::bigint, 50)))) s`, a.maxID+1, b.maxID).
			Scan(ctx, &sampled, &published, &p50, &p99); err != nil {
			return nil, err
		}
		rows, err := db.QueryContext(ctx, `SELECT event_id::text, extract(epoch FROM created_at) * 1e9 FROM outbox_events
WHERE id = ANY(ARRAY(SELECT generate_series(?::bigint, ?::bigint, 50)))`, a.maxID+1, b.maxID)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			var ns float64
			if err := rows.Scan(&id, &ns); err != nil {
				_ = rows.Close()
				return nil, err
			}
			ids, created = append(ids, id), append(created, ns)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
	}
	latency := fmt.Sprintf("%.1f / %.1f", p50, p99)
	if published < sampled { // only the rows published by the end of the interval have a latency
		latency = fmt.Sprintf("%s (%d of %d published)", latency, published, sampled)
	}
	if published == 0 {
		latency = fmt.Sprintf("– (0 of %d published)", sampled)
	}
	if stream && published == 0 {
		latency = "– (streamed)"
	}
	inRedis, err := redisLatency(ctx, rdb, q, ids, created)
	if err != nil {
		return nil, err
	}
	read := claimTime
	if stream {
		read = streamReadTime
	}
	claim, err := read(ctx, db)
	if err != nil {
		return nil, err
	}
	var wal int64
	if err := db.NewRaw("SELECT pg_wal_lsn_diff(?::pg_lsn, ?::pg_lsn)::bigint", b.lsn, a.lsn).Scan(ctx, &wal); err != nil {
		return nil, err
	}
	var all, pending int64
	for _, ix := range b.indexes {
		all += ix.bytes
		if ix.pending {
			pending += ix.bytes
		}
	}
	av := fmt.Sprintf("%d (no log)", b.avCount-a.avCount) // pg_stat_user_tables.autovacuum_count alone
	if b.avN >= 0 {
		av = fmt.Sprintf("%d / %.1f s (%d analyze)", b.avN, b.avSec, b.anN)
	}
	handler := "–"
	if consumed != nil {
		if handler, err = handlerLatency(ctx, db, consumed); err != nil {
			return nil, err
		}
	}
	row := []string{fmtElapsed(b.at.Sub(start)), fmt.Sprintf("%.0f", float64(events)/secs),
		fmt.Sprintf("%.0f", float64(b.inRedis-a.inRedis+b.processed-a.processed)/secs), fmt.Sprintf("%.0f", float64(b.processed-a.processed)/secs),
		strconv.FormatInt(b.pending, 10), latency, inRedis, handler, fmt.Sprintf("%.2f", claim),
		fmt.Sprintf("%.0f", float64(b.tableBytes)/(1<<20)), fmt.Sprintf("%.0f", float64(all)/(1<<20)),
		strconv.FormatInt(pending/1024, 10), fmt.Sprintf("%.0f", float64(wal)/float64(max(1, events))),
		strconv.FormatInt(b.rows, 10), fmt.Sprintf("%d (%.0f/s)", b.relay.cleaned-a.relay.cleaned, float64(b.relay.cleaned-a.relay.cleaned)/secs),
		av, strconv.FormatInt(b.dead, 10), strconv.FormatInt(b.smallDead, 10), strconv.FormatInt(b.positions, 10), map[bool]string{true: "yes", false: "no"}[b.holding],
		fmt.Sprintf("%d / %d / %d", b.relay.passes-a.relay.passes, b.relay.checked-a.relay.checked, b.relay.requeued-a.relay.requeued),
		fmt.Sprintf("%.0f", b.redisMB), b.load}
	return append(row, cpuColumns(a.cpu, b.cpu, secs)...), nil
}

// redisLatency is "p50 / p99" of created → in Redis of the events ids (created at created, unix ns): the
// pending_since asynq's client writes into each task's hash when it enqueues it, read in one pipeline.
// Tasks not in Redis yet are left out and counted.
func redisLatency(ctx context.Context, rdb *redis.Client, q string, ids []string, created []float64) (string, error) {
	if len(ids) == 0 {
		return "–", nil
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, "asynq:{"+q+"}:t:"+id, "pending_since")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", err
	}
	var ms []float64
	for i, c := range cmds {
		ns, err := c.Float64()
		if err != nil {
			continue // not in Redis yet
		}
		ms = append(ms, (ns-created[i])/1e6)
	}
	return latencySummary(ms, len(ids), "in Redis", "in Redis"), nil
}

// latencySummary formats the latencies ms (in ms) of a sample of n as "p50 / p99", saying how many of the
// n it measured when not all: none (noneWhat) or some (someWhat).
func latencySummary(ms []float64, n int, noneWhat, someWhat string) string {
	if len(ms) == 0 {
		return fmt.Sprintf("– (0 of %d %s)", n, noneWhat)
	}
	slices.Sort(ms)
	s := fmt.Sprintf("%.1f / %.1f", median(ms), ms[min(len(ms)-1, int(float64(len(ms))*0.99))])
	if len(ms) < n {
		s += fmt.Sprintf(" (%d of %d %s)", len(ms), n, someWhat)
	}
	return s
}

// streamWaitingSQL counts the streamed rows of queue q the cursor has not passed (internal/streamsql's
// Pending, as bunbox status counts them): 0 with the stream never turned on. (q is a queue name of
// env.queue: letters, digits, "_".)
func streamWaitingSQL(q string) string {
	return `SELECT count(*) FROM ` + streamsql.PendingRows + ` e WHERE e.queue = '` + q + `'`
}

func totalBytes(s sustainSnap) int64 {
	n := s.tableBytes
	for _, ix := range s.indexes {
		n += ix.bytes
	}
	return n
}

func fmtElapsed(d time.Duration) string { return d.Round(time.Second).String() }

// pace hands out rate numbered transactions a second on tokens, from a ticker of 1 ms, until ctx ends; what
// the writers leave waiting for more than a second is counted in missed, not caught up later.
func pace(ctx context.Context, rate float64, tokens chan<- int64, missed *atomic.Int64) {
	defer close(tokens)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	start := time.Now()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := int64(now.Sub(start).Seconds() * rate)
			for ; sent < due; sent++ {
				select {
				case tokens <- sent:
				default:
					missed.Add(due - sent)
					sent = due - 1
				}
			}
		}
	}
}

// avLog reads the server log for the automatic vacuums and analyzes of one table.
type avLog struct {
	f            *os.File
	table        string // "database.schema.outbox_events"
	vacuum, anal *regexp.Regexp
	in           string // "vacuum" or "analyze" while inside such an entry's lines
}

var elapsedRE = regexp.MustCompile(`elapsed: ([0-9.]+) s`)

// openAutovacuumLog opens the server log at its end: path, or server.log in the data directory (where
// scripts/devservices.sh has pg_ctl write it).
func openAutovacuumLog(ctx context.Context, e *env, path, schema string) (*avLog, error) {
	var dbname string
	if err := e.admin.NewRaw("SELECT current_database()").Scan(ctx, &dbname); err != nil {
		return nil, err
	}
	if path == "" {
		var dir string
		if err := e.admin.NewRaw("SELECT current_setting('data_directory')").Scan(ctx, &dir); err != nil {
			return nil, err
		}
		path = dir + "/server.log"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the server log (-pg-log): %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		_ = f.Close()
		return nil, err
	}
	t := regexp.QuoteMeta(`"` + dbname + "." + schema + `.outbox_events"`)
	return &avLog{f: f, table: t, vacuum: regexp.MustCompile(`automatic vacuum of table ` + t),
		anal: regexp.MustCompile(`automatic analyze of table ` + t)}, nil
}

// read returns the vacuums and analyzes of the table logged since the last read, and the vacuums' elapsed
// seconds. An entry being written at the moment is read in part; its elapsed time then counts in the next read.
func (l *avLog) read() (vacuums, analyzes int, secs float64) {
	sc := bufio.NewScanner(l.f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case l.vacuum.MatchString(line):
			l.in, vacuums = "vacuum", vacuums+1
		case l.anal.MatchString(line):
			l.in, analyzes = "analyze", analyzes+1
		case strings.HasPrefix(line, "\t") && l.in == "vacuum":
			if m := elapsedRE.FindStringSubmatch(line); m != nil {
				s, _ := strconv.ParseFloat(m[1], 64)
				secs += s
				l.in = ""
			}
		case !strings.HasPrefix(line, "\t"):
			l.in = ""
		}
	}
	return vacuums, analyzes, secs
}

// dropBigQueue deletes the tasks of queue q a batch at a time (asynq's DeleteQueue would run one Lua script
// over millions of keys, holding Redis for its whole length), then its pending list, and says what it did.
// It has a client of its own with a read timeout of a minute: with the machine loaded, an UNLINK of 10,000
// keys outlived go-redis's 3 s, the tasks stayed, and env.close's DeleteQueue then held Redis for minutes.
func dropBigQueue(run *redis.Client, q string) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: run.Options().Addr, ReadTimeout: time.Minute})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, "asynq:{"+q+"}:t:*", 10_000).Iterator()
	batch := make([]string, 0, 2_000)
	var n int
	var err error
	flush := func() {
		if err == nil && len(batch) > 0 {
			err = rdb.Unlink(ctx, batch...).Err()
			n += len(batch)
		}
		batch = batch[:0]
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
	if err == nil {
		err = iter.Err()
	}
	if err == nil {
		err = rdb.Unlink(ctx, "asynq:{"+q+"}:pending", "asynq:{"+q+"}:completed", "asynq:{"+q+"}:active", "asynq:{"+q+"}:lease",
			"asynq:{"+q+"}:processed", "asynq:{"+q+"}:failed").Err()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bunbench: deleting the tasks of queue %s: %v (%d deleted)\n", q, err, n)
	}
}

// runKeptDrain is the keptdrain part: o.keptN pending events drained by the relay (relayDrain, as the drain
// and growth parts do) from a table that keeps o.keptRows published rows and from one that keeps none,
// o.rounds rounds with the two cases alternating.
func runKeptDrain(ctx context.Context, e *env, o options) error {
	ran := false
	for _, a := range sustainArms {
		if !o.want(a.name) {
			continue
		}
		ran = true
		if err := keptDrainArm(ctx, e, o, a.name, a.stream); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	if !ran {
		return fmt.Errorf("-arms %q names no arm of this part (bunbox relay, bunbox per-row)", o.arms)
	}
	return nil
}

// keptDrainArm is the keptdrain part for one relay. With stream, both outboxes keep the stream on (the
// default; without it relay.DisableStream turns it off on both before any row is written), the kept
// rows are streamed rows the cursor has passed (written with the stream's defaults, then the cursor moved
// past them as a relay's round does: snap_from the current snapshot), and each backlog is streamed
// (fillStream).
func keptDrainArm(ctx context.Context, e *env, o options, name string, stream bool) error {
	fmt.Printf("## Drain with %d published rows kept, %s: %d pending events, %d rounds alternating (load average %s)\n\n",
		o.keptRows, name, o.keptN, o.rounds, loadAverage())
	kept, _, err := e.schema(ctx, 20, true)
	if err != nil {
		return err
	}
	empty, _, err := e.schema(ctx, 20, true)
	if err != nil {
		return err
	}
	publishedAt, published := "", "" // the stream's default, 'infinity'
	for _, db := range []*bun.DB{kept, empty} {
		if stream {
			err = streamOn(ctx, db)
		} else {
			err = disableStream(ctx, db)
			publishedAt, published = ", published_at", ", t"
		}
		if err != nil {
			return err
		}
	}
	t0 := time.Now()
	const chunk = 1_000_000
	for done := 0; done < o.keptRows; done += chunk {
		// Published over the 7 days of PublishedRetention up to 2 hours ago (out of the reconciler's 1 h window:
		// their tasks are not in Redis, and a relay's first reconciler pass would requeue those it saw), with
		// a payload of about 80 bytes that varies.
		if _, err := kept.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload, created_at`+publishedAt+`)
SELECT gen_random_uuid(), 'bench.order_placed', 'default',
  jsonb_build_object('order_id', g, 'ref', 'ord-' || lpad(g::text, 12, '0'), 'total', (g % 10000) / 100.0, 'currency', 'EUR'),
  t - interval '5 ms'`+published+`
FROM generate_series(?::bigint, ?::bigint) g,
  LATERAL (SELECT now() - interval '2 hours' - interval '166 hours' * (1 - g::float8 / ?) AS t) s`,
			done+1, min(done+chunk, o.keptRows), o.keptRows); err != nil {
			return err
		}
	}
	if stream { // delivered: the cursor past every row written so far
		if err := passCursor(ctx, kept, int64(o.keptRows)); err != nil {
			return err
		}
		if err := passCursor(ctx, empty, 0); err != nil {
			return err
		}
	}
	if err := execAll(ctx, kept, "VACUUM ANALYZE outbox_events", "CHECKPOINT"); err != nil {
		return err
	}
	fill := time.Since(t0)
	type side struct {
		name         string
		db           *bun.DB
		rates, claim []float64
	}
	sides := []*side{{name: "empty table", db: empty}, {name: fmt.Sprintf("%d published rows kept", o.keptRows), db: kept}}
	var ratios []float64
	for r := range o.rounds {
		got := map[*side]float64{}
		for i := range sides {
			s := sides[(i+r)%2] // alternate which goes first
			q := e.queue("kept")
			read := claimTime
			if stream {
				read = streamReadTime
			}
			if err := fillBacklog(ctx, s.db, q, o.keptN, stream); err != nil {
				return err
			}
			claim, err := read(ctx, s.db)
			if err != nil {
				return err
			}
			rate, capped, err := relayDrain(ctx, s.db, e.redis, o.keptN, o.drainCap, nil)
			if err != nil {
				return err
			}
			if capped {
				st, serr := readStreamState(ctx, s.db)
				return fmt.Errorf("%s: the drain hit -drain-cap %s at %.0f events/s (%s)", s.name, o.drainCap, rate, st.describe(serr))
			}
			if stream {
				if st, err := readStreamState(ctx, s.db); err != nil || st.waiting != 0 || st.pending != 0 {
					return fmt.Errorf("%s: after the drain, %s", s.name, st.describe(err))
				}
			}
			// The queue stays until the run ends: the next round's relay runs the reconciler, which would
			// requeue the rows whose tasks it did not find.
			s.rates, s.claim = append(s.rates, rate), append(s.claim, claim)
			got[s] = rate
		}
		ratios = append(ratios, got[sides[1]]/got[sides[0]])
	}
	var rows [][]string
	for _, s := range sides {
		var size int64
		if err := s.db.NewRaw("SELECT pg_total_relation_size('outbox_events')").Scan(ctx, &size); err != nil {
			return err
		}
		each := make([]string, len(s.rates))
		for i, v := range s.rates {
			each[i] = fmt.Sprintf("%.0f", v)
		}
		rows = append(rows, []string{s.name, strings.Join(each, ", "), fmt.Sprintf("**%.0f**", median(s.rates)),
			fmt.Sprintf("%.2f", median(s.claim)), fmt.Sprintf("%.0f", float64(size)/(1<<20))})
	}
	table([]string{"table holds", "drain events/s, each round", "median", "claim of 500 ms (stream: read of 500; median)", "table + indexes MB at the end"}, rows)
	fmt.Printf("\nKept / empty: **%.3f** of the medians (per round %s). Filling %d rows, VACUUM ANALYZE and CHECKPOINT took %s. "+
		"Each round writes the backlog (fillBacklog: transactions of 1,000 events, VACUUM ANALYZE, CHECKPOINT) then drains it "+
		"with relay.New (DisableNotify, PublishedRetention -1, as the drain part); the drained rows stay, published. With the "+
		"stream on (the default), the backlog is streamed and the read is the stream round's; per-row, it is the claim.\n",
		median(sides[1].rates)/median(sides[0].rates), spread(ratios), o.keptRows, fill.Round(time.Second))
	return nil
}

// passCursor moves the stream's cursor of the outbox in db's schema past every row written so far, as a
// relay's round does (snap_from the current snapshot), checks that the outbox then holds delivered streamed
// rows and no waiting one, and records the time mark that the reconcilers of a table written over days would
// have recorded before the window of a new relay's reconciler (bunbox_stream_marks): the rows written so far
// count as created then, so only those written from now on are past it. Without it that reconciler's first
// sweep reads every kept row, as one just deployed on a table with no marks yet does.
func passCursor(ctx context.Context, db *bun.DB, delivered int64) error {
	if _, err := db.ExecContext(ctx, streamsql.Moved(`pg_current_snapshot(), NULL, NULL, NULL, c.system_id, c.max_id, now()`,
		`true`)); err != nil { // the base and the lanes
		return err
	}
	if st, err := readStreamState(ctx, db); err != nil || st.delivered != delivered || st.waiting != 0 {
		return fmt.Errorf("the kept rows are not all delivered streamed rows (%d expected): %s", delivered, st.describe(err))
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO bunbox_stream_marks (at, next_xid)
VALUES (now() - make_interval(secs => ?::float8), pg_snapshot_xmax(pg_current_snapshot()))`,
		(time.Hour /* ReconcilerConfig.Window's default */ + time.Minute).Seconds()); err != nil {
		return fmt.Errorf("record a time mark: %w", err)
	}
	return nil
}

// holdXmin opens, o.holdAfter after it is called, a REPEATABLE READ transaction that holds the xmin horizon
// for o.holdXmin (with a transaction id when o.holdXid: a session that wrote and stayed open), then rolls
// it back. holding says when it is open. It ends early, rolling back, when ctx ends.
func holdXmin(ctx context.Context, db *bun.DB, o options, holding *atomic.Bool) error {
	wait := time.NewTimer(o.holdAfter)
	defer wait.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-wait.C:
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var n int64
	if err := tx.NewRaw("SELECT count(*) FROM outbox_events WHERE id < 0").Scan(ctx, &n); err != nil {
		return err // the snapshot is taken with the first statement
	}
	if o.holdXid {
		if _, err := tx.ExecContext(ctx, "SELECT pg_current_xact_id()"); err != nil {
			return err
		}
	}
	holding.Store(true)
	defer holding.Store(false)
	hold := time.NewTimer(o.holdXmin)
	defer hold.Stop()
	select {
	case <-ctx.Done():
	case <-hold.C:
	}
	return nil
}

// withoutJIT runs read in a transaction with jit off, as bunbox status reads its counts
// (store.ReadWithoutJIT): planned from the few rows of bunbox_stream that no ANALYZE counted, the counts'
// estimated cost passes jit_above_cost, and compiling them took seconds of the server's CPU.
func withoutJIT(ctx context.Context, db *bun.DB, read func(tx bun.Tx) error) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, "SELECT set_config('jit', 'off', true)"); err != nil {
			return err
		}
		return read(tx)
	})
}
