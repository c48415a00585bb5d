package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/bunx"
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
	queue      string
	proc       *exec.Cmd
}

func lullArms() []*lullArm {
	return []*lullArm{
		{name: "wake-up off (before)", note: "relay.Config{WakeInterval: -1}, every other field at its default: the adaptive poll up to PollInterval 500 ms", wake: -1},
		{name: "default Config (wake-up on)", note: "relay.Config{}: the wake-up reads the id sequence's last value every 5 ms", wake: 0},
		{name: "wake-up every 10 ms", note: "relay.Config{WakeInterval: 10 * time.Millisecond}", wake: 10 * time.Millisecond},
	}
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
	arms := lullArms()
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
	taxRows := make([][]string, len(arms))
	for i, a := range arms { // then the write tax, one relay process at a time
		if err := a.start(ctx, e); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		taxRows[i], err = a.tax(ctx, o, none)
		a.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
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
	table([]string{"relay running", "no event, 8 writers tx/s", "bunbox Record, 8 writers tx/s", "ratio to no event"}, taxRows)
	fmt.Printf("\nThe write tax with each relay in its own process relaying what the writers commit: one order per "+
		"transaction, with its event (Outbox.Record) or without; medians of %d rounds of %s per arm, the two arms taken in "+
		"turn one transaction at a time by each writer (min–max ratio in brackets).\n", o.rounds, o.dur)
	return nil
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

// tax measures the write tax at 8 writers into the arm's schema, with its relay process running.
func (a *lullArm) tax(ctx context.Context, o options, none *bun.DB) ([]string, error) {
	if err := createTables(ctx, a.db); err != nil {
		return nil, err
	}
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
	var plain, rec, ratio []float64
	for r := range o.rounds {
		got, err := interleave(ctx, 8, o.dur*time.Duration(len(fns)), r, fns)
		if err != nil {
			return nil, err
		}
		plain, rec, ratio = append(plain, got[0]), append(rec, got[1]), append(ratio, got[1]/got[0])
	}
	return []string{a.name, fmt.Sprintf("%.0f", median(plain)), fmt.Sprintf("%.0f", median(rec)),
		fmt.Sprintf("**%.2f** (%s)", median(ratio), spread(ratio))}, nil
}

// start migrates a schema of the arm's own and starts its relay process on it.
func (a *lullArm) start(ctx context.Context, e *env) error {
	db, schema, err := e.schema(ctx, 10, true)
	if err != nil {
		return err
	}
	a.db, a.ob, a.queue = db, bunx.New(db), e.queue("lull")
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	a.proc = exec.CommandContext(ctx, exe, childRelayCommand, schema, a.wake.String())
	a.proc.Stderr = os.Stderr
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
	url, addr := os.Getenv("TEST_DATABASE_URL"), os.Getenv("TEST_REDIS_ADDR")
	db := openBun(url, map[string]any{"search_path": args[0]}, 20)
	defer db.Close()
	r, err := relay.New(db, asynq.RedisClientOpt{Addr: addr}, relay.Config{WakeInterval: wake})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	fmt.Println("running")
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
