package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/relayenv"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// The lull part: the first event after a quiet spell, with the relay in a process of its own at its default
// Config, with the wake-up (relay.Config.WakeInterval) off (the relay before it) and on (the default).

const childRelayCommand = "-child-relay"

// lullArm is one relay process: its schema, its queue and what it costs while idle.
type lullArm struct {
	name, note string
	wake       time.Duration // relay.Config.WakeInterval; 0 is the default
	db         *bun.DB
	ob         *bunx.Outbox
	schema     string
	queue      string
	proc       *exec.Cmd
	extra      bool // run only when -arms names it
	perRow     bool // relay.DisableStream on the arm's outbox before its relay starts: the per-row path
}

func lullArms() []*lullArm {
	return []*lullArm{
		{name: "wake-up off (before)", note: "relay.Config{WakeInterval: -1}, every other field at its default: the adaptive poll up to PollInterval 500 ms; the stream on, as the migrations leave it", wake: -1},
		{name: "default Config (wake-up on)", note: "relay.Config{} on a freshly migrated outbox: every event streamed (the snapshot cursor); the wake-up reads the id sequence's last value every 5 ms", wake: 0},
		{name: "wake-up every 10 ms", note: "relay.Config{WakeInterval: 10 * time.Millisecond}, the stream on", wake: 10 * time.Millisecond},
		{name: "bunbox per-row, default Config", note: "relay.Config{} on an outbox where relay.DisableStream was called: every event a pending row of the per-row path", wake: 0, perRow: true},
		{name: "A/A: wake-up off, a second arm", note: "relay.Config{WakeInterval: -1} again: the spread of two identical arms", wake: -1, extra: true},
	}
}

// wantedLullArms are the arms -arms names (each an arm whose name contains one of its words), or the
// arms that are not extra when it names none.
func wantedLullArms(o options) []*lullArm {
	var arms []*lullArm
	for _, a := range lullArms() {
		if o.arms == "" && !a.extra || o.arms != "" && o.want(a.name) {
			arms = append(arms, a)
		}
	}
	return arms
}

// runLull measures, for each arm in turn (its relay process the only one running), commit → task in Redis
// of one event after each of o.lullN quiet spells of o.lull, what the idle relay costs PostgreSQL and its
// own process per second, and the write tax at 8 writers while the relay relays what they write.
func runLull(ctx context.Context, e *env, o options) error {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("## Lull: the first event after %s of quiet, the relay in another process (load average %s)\n\n",
		o.lull, strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	pm, err := postmasterPID(ctx, e)
	if err != nil {
		return err
	}
	none, _, err := e.schema(ctx, 10, true)
	if err != nil {
		return err
	}
	if err := createTables(ctx, none); err != nil {
		return err
	}
	cpuDur := min(5*time.Second, max(o.lull, 2*time.Second))
	arms := wantedLullArms(o)
	rows := make([][]string, len(arms))
	for i, a := range arms { // the samples and the idle CPU, one relay process at a time
		// Settle: the backends of the previous relay exited (their CPU lands on the postmaster then).
		if _, err := idleCPU(ctx, pm, 0, time.Second); err != nil {
			return err
		}
		base, err := idleCPU(ctx, pm, 0, cpuDur) // no relay running
		if err != nil {
			return err
		}
		if err := a.start(ctx, e); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		rows[i], err = a.lull(ctx, e, o, pm, base, cpuDur)
		a.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	taxRows, err := lullTax(ctx, e, o, pm, none, arms)
	if err != nil {
		return err
	}
	table([]string{"relay", fmt.Sprintf("commit → task in Redis after %s of quiet, ms", o.lull), "median ms", "max ms",
		"PostgreSQL CPU of the idle relay, ms/s", "the idle relay's process CPU, ms/s"}, rows)
	fmt.Printf("\nOne sample per quiet spell; latency from the producer's commit returning to the task in Redis "+
		"(asynq's Inspector, polled every 0.2 ms). CPU over %s of quiet from 2 s after the relay's last event: PostgreSQL's "+
		"(postmaster and backends) less what it used over %s with no relay running, just before the relay started.\n", cpuDur, cpuDur)
	for _, a := range arms {
		fmt.Printf("- %s: %s\n", a.name, a.note)
	}
	fmt.Println()
	table([]string{"relay running", "no event, 8 writers tx/s", "bunbox Record, 8 writers tx/s", "ratio to no event",
		"PostgreSQL CPU, ms/s", "the relay's process CPU, ms/s"}, taxRows)
	fmt.Printf("\nThe write tax with each relay in its own process relaying what the writers commit: one order per "+
		"transaction, with its event (Outbox.Record) or without; medians of %d rounds of %s per arm, the two arms taken in "+
		"turn one transaction at a time by each writer (min–max ratio in brackets). The relays take turns round by round "+
		"(round r starts at arm r), each started on its own schema for its round and warmed by one event, so that the "+
		"table's growth, autovacuum and the machine's load fall on every relay alike. CPU: medians over the rounds, per "+
		"second of the round (PostgreSQL's processes, writers included).\n", o.rounds, o.dur)
	return nil
}

// lullTax measures the write tax of each arm, o.rounds rounds, the arms taking turns round by round.
// With pg_stat_statements installed in the database, it prints each arm's statements by total time over
// its rounds (BUNBENCH_STATEMENTS=1), and with BUNBENCH_RELAY_PROFILE=DIR each relay process writes a CPU
// profile of its round into DIR.
func lullTax(ctx context.Context, e *env, o options, pm int, none *bun.DB, arms []*lullArm) ([][]string, error) {
	for _, a := range arms { // a schema for each arm's tax rounds
		db, schema, err := e.schema(ctx, 10, true)
		if err != nil {
			return nil, err
		}
		if err := createTables(ctx, db); err != nil {
			return nil, err
		}
		if a.perRow {
			if err := disableStream(ctx, db); err != nil {
				return nil, fmt.Errorf("%s: %w", a.name, err)
			}
		}
		a.db, a.ob, a.schema, a.queue = db, bunx.New(db), schema, e.queue("lulltax")
	}
	type tally struct{ plain, rec, ratio, pg, proc []float64 }
	tallies := make([]tally, len(arms))
	stmts := make([]map[string]stmtStat, len(arms))
	statements := os.Getenv("BUNBENCH_STATEMENTS") != ""
	for r := range o.rounds {
		for k := range arms {
			i := (r + k) % len(arms)
			a := arms[i]
			if err := a.startProc(ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", a.name, err)
			}
			if _, err := a.sample(ctx, e, 0); err != nil { // warm: the relay relays, its connections are open
				a.stop()
				return nil, fmt.Errorf("%s: %w", a.name, err)
			}
			if statements {
				if _, err := e.admin.ExecContext(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
					a.stop()
					return nil, fmt.Errorf("BUNBENCH_STATEMENTS: %w", err)
				}
			}
			pg0, proc0, t0 := pgCPU(pm), procCPU(a.proc.Process.Pid), time.Now()
			got, err := a.taxRound(ctx, o, none, r)
			secs := time.Since(t0).Seconds()
			pg, proc := pgCPU(pm)-pg0, procCPU(a.proc.Process.Pid)-proc0
			if err == nil && statements {
				err = addStatements(ctx, e, &stmts[i])
			}
			a.stop()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.name, err)
			}
			t := &tallies[i]
			t.plain, t.rec, t.ratio = append(t.plain, got[0]), append(t.rec, got[1]), append(t.ratio, got[1]/got[0])
			t.pg, t.proc = append(t.pg, pg.Seconds()*1000/secs), append(t.proc, proc.Seconds()*1000/secs)
		}
	}
	rows := make([][]string, len(arms))
	for i, a := range arms {
		t := tallies[i]
		rows[i] = []string{a.name, fmt.Sprintf("%.0f", median(t.plain)), fmt.Sprintf("%.0f", median(t.rec)),
			fmt.Sprintf("**%.2f** (%s)", median(t.ratio), spread(t.ratio)), fmt.Sprintf("%.0f", median(t.pg)),
			fmt.Sprintf("%.0f", median(t.proc))}
		if statements {
			printStatements(a.name, stmts[i], o.rounds)
		}
	}
	return rows, nil
}

// stmtStat is one statement's figures in pg_stat_statements.
type stmtStat struct {
	calls      int64
	exec, plan float64 // ms
	rows       int64
	sharedBlks int64
	walRecords int64
}

// addStatements adds what pg_stat_statements holds to into, by the statement's text.
func addStatements(ctx context.Context, e *env, into *map[string]stmtStat) error {
	rows, err := e.admin.QueryContext(ctx, `SELECT query, calls, total_exec_time, total_plan_time, rows,
  shared_blks_hit + shared_blks_read, wal_records FROM pg_stat_statements`)
	if err != nil {
		return err
	}
	defer rows.Close()
	if *into == nil {
		*into = map[string]stmtStat{}
	}
	for rows.Next() {
		var q string
		var s stmtStat
		if err := rows.Scan(&q, &s.calls, &s.exec, &s.plan, &s.rows, &s.sharedBlks, &s.walRecords); err != nil {
			return err
		}
		q = strings.Join(strings.Fields(q), " ")
		t := (*into)[q]
		t.calls, t.exec, t.plan, t.rows = t.calls+s.calls, t.exec+s.exec, t.plan+s.plan, t.rows+s.rows
		t.sharedBlks, t.walRecords = t.sharedBlks+s.sharedBlks, t.walRecords+s.walRecords
		(*into)[q] = t
	}
	return rows.Err()
}

// printStatements prints an arm's statements by total time (execution and planning), the top 12.
func printStatements(arm string, stmts map[string]stmtStat, rounds int) {
	qs := make([]string, 0, len(stmts))
	for q := range stmts {
		qs = append(qs, q)
	}
	total := func(q string) float64 { return stmts[q].exec + stmts[q].plan }
	slices.SortFunc(qs, func(a, b string) int { return cmp.Compare(total(b), total(a)) })
	fmt.Printf("\npg_stat_statements over the %d tax rounds of %s (total ms, calls, µs per call exec+plan, rows, WAL records):\n\n", rounds, arm)
	shown := qs[:min(12, len(qs))]
	for _, q := range qs[len(shown):] { // the wake-up's read, wherever it ranks
		if strings.Contains(q, "pg_sequence_last_value") {
			shown = append(shown, q)
		}
	}
	for _, q := range shown {
		s := stmts[q]
		if len(q) > 110 {
			q = q[:110] + "…"
		}
		fmt.Printf("    %8.1f ms %8d calls %7.1f+%5.1f µs %8d rows %7d wal  %s\n", s.exec+s.plan, s.calls,
			s.exec*1000/float64(max(s.calls, 1)), s.plan*1000/float64(max(s.calls, 1)), s.rows, s.walRecords, q)
	}
}

// taxRound runs one round of the write tax at 8 writers into the arm's schema: no event, and Record.
func (a *lullArm) taxRound(ctx context.Context, o options, none *bun.DB, round int) ([]float64, error) {
	fns := []func(context.Context) error{
		func(ctx context.Context) error {
			return none.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return insertOrder(ctx, tx, false, nil) })
		},
		func(ctx context.Context) error {
			return a.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				return insertOrder(ctx, tx, false, func(names []string, payloads []any) error {
					ev, err := model.NewEvent(names[0], payloads[0], model.WithQueue(a.queue))
					if err != nil {
						return err
					}
					return a.ob.Record(ctx, tx, ev)
				})
			})
		},
	}
	return interleave(ctx, 8, o.dur*time.Duration(len(fns)), round, fns)
}

// lull takes the arm's samples and its idle CPU, with its relay process running.
func (a *lullArm) lull(ctx context.Context, e *env, o options, pm int, base idleCPUs, cpuDur time.Duration) ([]string, error) {
	if _, err := a.sample(ctx, e, 0); err != nil { // warm: the relay relays, its connections are open
		return nil, err
	}
	// Idle: past the second of fast polling that follows the rows a relay saw (relay's hotWindow).
	if _, err := idleCPU(ctx, pm, 0, 2*time.Second); err != nil {
		return nil, err
	}
	cpu, err := idleCPU(ctx, pm, a.proc.Process.Pid, cpuDur)
	if err != nil {
		return nil, err
	}
	var lat []float64
	for range o.lullN {
		ms, err := a.sample(ctx, e, o.lull)
		if err != nil {
			return nil, err
		}
		lat = append(lat, ms)
	}
	samples := make([]string, len(lat))
	for i, ms := range lat {
		samples[i] = fmt.Sprintf("%.1f", ms)
	}
	perSec := func(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()*1000/cpuDur.Seconds()) }
	return []string{a.name, strings.Join(samples, ", "), fmt.Sprintf("**%.1f**", median(lat)),
		fmt.Sprintf("**%.1f**", slices.Max(lat)), perSec(cpu.pg - base.pg), perSec(cpu.proc)}, nil
}

// start migrates a schema of the arm's own and starts its relay process on it.
func (a *lullArm) start(ctx context.Context, e *env) error {
	db, schema, err := e.schema(ctx, 10, true)
	if err != nil {
		return err
	}
	if a.perRow {
		if err := disableStream(ctx, db); err != nil {
			return err
		}
	}
	a.db, a.ob, a.schema, a.queue = db, bunx.New(db), schema, e.queue("lull")
	return a.startProc(ctx)
}

// startProc starts the arm's relay process on its schema.
func (a *lullArm) startProc(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	a.proc = exec.CommandContext(ctx, exe, childRelayCommand, a.schema, a.wake.String())
	a.proc.Stderr = os.Stderr
	dieWithParent(a.proc)
	out, err := a.proc.StdoutPipe()
	if err != nil {
		return err
	}
	if err := a.proc.Start(); err != nil {
		return err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "running" {
		return fmt.Errorf("the relay's process did not start: %q %v", line, err)
	}
	return nil
}

func (a *lullArm) stop() {
	if a.proc == nil || a.proc.Process == nil {
		return
	}
	_ = a.proc.Process.Signal(os.Interrupt)
	_ = a.proc.Wait()
	a.proc = nil
}

// sample waits quiet, commits one event and returns the milliseconds from the commit's return to its
// task in Redis.
func (a *lullArm) sample(ctx context.Context, e *env, quiet time.Duration) (float64, error) {
	if quiet > 0 {
		select { // the quiet spell is what is measured
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(quiet):
		}
	}
	ev, err := model.NewEvent("bench.lull", orderPlaced{OrderID: 1, Ref: "r"}, model.WithQueue(a.queue))
	if err != nil {
		return 0, err
	}
	if err := a.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error { return a.ob.Record(ctx, tx, ev) }); err != nil {
		return 0, err
	}
	committed := time.Now()
	id := ev.EventID.String()
	for deadline := committed.Add(30 * time.Second); ; {
		_, err := e.ins.GetTaskInfo(a.queue, id)
		if err == nil {
			return float64(time.Since(committed).Microseconds()) / 1000, nil
		}
		if !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
			return 0, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("event %s not in Redis 30 s after its commit", id)
		}
		time.Sleep(200 * time.Microsecond) // the poll step of the measurement
	}
}

// idleCPUs is the CPU a span used: PostgreSQL's (the postmaster and its backends) and one process's.
type idleCPUs struct{ pg, proc time.Duration }

// idleCPU measures d of CPU of PostgreSQL's processes and of process pid (0: none).
func idleCPU(ctx context.Context, pm, pid int, d time.Duration) (idleCPUs, error) {
	pg0, proc0 := pgCPU(pm), procCPU(pid)
	select {
	case <-ctx.Done():
		return idleCPUs{}, ctx.Err()
	case <-time.After(d):
	}
	return idleCPUs{pg: pgCPU(pm) - pg0, proc: procCPU(pid) - proc0}, nil
}

// postmasterPID is the parent of a backend of the run's database: the server must be on this machine.
func postmasterPID(ctx context.Context, e *env) (int, error) {
	var backend int
	if err := e.admin.NewRaw("SELECT pg_backend_pid()").Scan(ctx, &backend); err != nil {
		return 0, err
	}
	f, err := procFields(backend)
	if err != nil {
		return 0, fmt.Errorf("PostgreSQL's processes must be on this machine: %w", err)
	}
	return strconv.Atoi(f[1])
}

// pgCPU is the CPU time of the postmaster pm, of its children that exited, and of those running.
func pgCPU(pm int) time.Duration {
	total := ticks(pm, 11, 12, 13, 14)
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == pm {
			continue
		}
		if f, err := procFields(pid); err == nil && f[1] == strconv.Itoa(pm) {
			total += ticks(pid, 11, 12)
		}
	}
	return total
}

func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	return ticks(pid, 11, 12)
}

// ticks sums fields of /proc/pid/stat (counted after the command's parenthesis, the state being 0) as CPU time.
func ticks(pid int, fields ...int) time.Duration {
	f, err := procFields(pid)
	if err != nil {
		return 0
	}
	var n int64
	for _, i := range fields {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		n += v
	}
	return time.Duration(n) * 10 * time.Millisecond // USER_HZ = 100
}

func procFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return f, nil
}

// runChildRelay is the relay's process of runLull: args are the schema and Config.WakeInterval. It prints
// "running" once the relay runs, and stops on SIGINT or SIGTERM.
func runChildRelay(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "bunbench -child-relay SCHEMA WAKE_INTERVAL")
		return 2
	}
	wake, err := time.ParseDuration(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir := os.Getenv("BUNBENCH_RELAY_PROFILE"); dir != "" { // a CPU profile of this relay process
		name := strings.NewReplacer(".", "_", "-", "off").Replace(args[1])
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("relay-%s-%d.pprof", name, os.Getpid())))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	url, addr := os.Getenv("TEST_DATABASE_URL"), os.Getenv("TEST_REDIS_ADDR")
	db := openBun(url, map[string]any{"search_path": args[0]}, 20)
	defer db.Close()
	cfg, err := relayenv.Config() // OUTBOX_* tune the child relay for an experiment; unset, every default
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.WakeInterval = cmp.Or(wake, cfg.WakeInterval)
	var passes relayPasses
	cfg.Reconciler.OnPass = passes.add
	r, err := relay.New(db, asynq.RedisClientOpt{Addr: addr}, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	fmt.Println("running")
	go answerStats(r, &passes) // the sustain part asks for the relay's counters on stdin
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
