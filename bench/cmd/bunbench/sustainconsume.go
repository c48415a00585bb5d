package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/worker"
)

// The sustain part's consumer (-sustain-consume) and the relay's counters it reads each interval.
//
// The consumer is a few asynq servers (worker.ServerConfig, as bunbox's docs have users start them) in a process of its own (so its CPU is measured apart) with a
// handler that does nothing (each server takes its tasks one Redis round trip at a time, so one server
// alone is bound by that round trip's latency, not by CPU), draining the run's queue so that Redis holds only the tasks in flight and the
// completed ones TaskRetention keeps (the relay's TaskRetention for the run: -sustain-task-retention).
// It samples the tasks whose id ends in "00" (about 1 in 256) and writes "c <task id> <unix ns>" on its
// stdout when their handler ran: with created_at, that is commit → handler.

const childConsumeCommand = "-child-consume"

// runChildConsume is the consumer's process: bunbench -child-consume QUEUE SERVERS CONCURRENCY.
func runChildConsume(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "bunbench -child-consume QUEUE SERVERS CONCURRENCY")
		return 2
	}
	servers, err := strconv.Atoi(args[1])
	if err != nil || servers < 1 {
		fmt.Fprintf(os.Stderr, "bunbench -child-consume: SERVERS must be a positive number, got %q\n", args[1])
		return 2
	}
	conc, err := strconv.Atoi(args[2])
	if err != nil || conc < 1 {
		fmt.Fprintf(os.Stderr, "bunbench -child-consume: CONCURRENCY must be a positive number, got %q\n", args[2])
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	handler := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		if strings.HasSuffix(id, "00") {
			now := time.Now().UnixNano()
			mu.Lock()
			fmt.Fprintf(out, "c %s %d\n", id, now)
			mu.Unlock()
		}
		return nil
	})
	srvs := make([]*asynq.Server, servers)
	for i := range srvs {
		srvs[i] = asynq.NewServer(asynq.RedisClientOpt{Addr: os.Getenv("TEST_REDIS_ADDR")}, worker.ServerConfig(asynq.Config{
			Concurrency: conc, Queues: map[string]int{args[0]: 1}, LogLevel: asynq.WarnLevel,
		}))
		if err := srvs[i].Start(handler); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer srvs[i].Shutdown()
	}
	fmt.Fprintln(out, "running")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		mu.Lock()
		err := out.Flush()
		mu.Unlock()
		if err != nil {
			break
		}
	}
	return 0
}

// consumer is the consumer's process seen from the sustain part.
type consumer struct {
	proc    *exec.Cmd
	mu      sync.Mutex
	samples map[string]int64 // task id → unix ns its handler ran, since the last take
}

// startConsumer starts the consumer's process on queue q: servers asynq servers of conc workers each.
func startConsumer(ctx context.Context, q string, servers, conc int) (*consumer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &consumer{samples: map[string]int64{}}
	c.proc = exec.CommandContext(ctx, exe, childConsumeCommand, q, strconv.Itoa(servers), strconv.Itoa(conc))
	c.proc.Stderr = os.Stderr
	dieWithParent(c.proc)
	out, err := c.proc.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.proc.Start(); err != nil {
		return nil, err
	}
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); err != nil || strings.TrimSpace(line) != "running" {
		c.stop()
		return nil, fmt.Errorf("the consumer's process did not start: %q %v", line, err)
	}
	go c.read(r)
	return c, nil
}

func (c *consumer) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "c" {
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		c.mu.Lock()
		c.samples[f[1]] = ns
		c.mu.Unlock()
	}
}

// take returns the samples since the last take.
func (c *consumer) take() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.samples
	c.samples = map[string]int64{}
	return s
}

func (c *consumer) stop() {
	_ = c.proc.Process.Signal(os.Interrupt)
	_ = c.proc.Wait()
}

// relayPasses adds up what the relay's reconciler passes returned (relay.ReconcilerConfig.OnPass).
type relayPasses struct {
	passes, failed, checked, missing, requeued atomic.Int64
}

func (p *relayPasses) add(res relay.ReconcileResult, err error) {
	p.passes.Add(1)
	if err != nil {
		p.failed.Add(1)
	}
	p.checked.Add(int64(res.Checked))
	p.missing.Add(int64(res.Missing))
	p.requeued.Add(int64(res.Requeued))
}

// answerStats answers each line "stats" on stdin with one line of the relay's counters: "stats" and
// relayStats's fields in order. It ends with stdin.
func answerStats(r *relay.Relay, p *relayPasses) {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "stats" {
			continue
		}
		s := r.Stats()
		fmt.Printf("stats %d %d %d %d %d %d %d\n", s.Published, s.Cleaned, p.passes.Load(), p.failed.Load(),
			p.checked.Load(), p.missing.Load(), p.requeued.Load())
	}
}

// relayStats are the relay process's counters since it started.
type relayStats struct {
	published, cleaned                               int64 // relay.Stats
	passes, failedPasses, checked, missing, requeued int64 // the reconciler's passes, added up
}

// relayAsker asks the relay's process for its counters.
type relayAsker struct {
	mu  sync.Mutex
	in  io.Writer
	out *bufio.Reader
}

func (a *relayAsker) ask() (relayStats, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var s relayStats
	if _, err := io.WriteString(a.in, "stats\n"); err != nil {
		return s, fmt.Errorf("ask the relay's process for its counters: %w", err)
	}
	line, err := a.out.ReadString('\n')
	if err != nil {
		return s, fmt.Errorf("read the relay's counters: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 8 || f[0] != "stats" {
		return s, fmt.Errorf("the relay's process answered %q to stats", line)
	}
	dst := []*int64{&s.published, &s.cleaned, &s.passes, &s.failedPasses, &s.checked, &s.missing, &s.requeued}
	for i, d := range dst {
		if *d, err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return s, fmt.Errorf("the relay's process answered %q to stats", line)
		}
	}
	return s, nil
}

// sustainRelayEnv is the environment (OUTBOX_* of internal/relayenv) that sets the relay process's
// PublishedRetention and TaskRetention for the run, and says what the relay runs with. An OUTBOX_ variable
// already set (e.g. OUTBOX_CLEANUP_INTERVAL) reaches the relay too, and is named.
func sustainRelayEnv(o options) (env []string, says string) {
	var set []string
	if o.sustainRetention != 0 {
		env = append(env, "OUTBOX_PUBLISHED_RETENTION="+o.sustainRetention.String())
	}
	taskRetention := o.sustainTaskRetention
	if taskRetention == 0 && o.sustainConsume {
		taskRetention = 2 * time.Minute
	}
	if taskRetention != 0 {
		env = append(env, "OUTBOX_TASK_RETENTION="+taskRetention.String())
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OUTBOX_") && !strings.HasPrefix(kv, "OUTBOX_PUBLISHED_RETENTION=") && !strings.HasPrefix(kv, "OUTBOX_TASK_RETENTION=") {
			set = append(set, kv)
		}
	}
	says = "the defaults"
	if all := append(slices.Clone(env), set...); len(all) > 0 {
		says = strings.Join(all, " ") + ", every other field at its default"
	}
	return env, says
}

// handlerLatency is "p50 / p99" of commit → handler of the tasks the consumer sampled: the time its
// handler ran (unix ns, by task id = event_id) − the row's created_at. Rows cleanup deleted already are
// left out and counted.
func handlerLatency(ctx context.Context, db *bun.DB, consumed map[string]int64) (string, error) {
	if len(consumed) == 0 {
		return "– (none sampled)", nil
	}
	ids := make([]string, 0, len(consumed))
	for id := range consumed {
		ids = append(ids, id)
	}
	rows, err := db.QueryContext(ctx, `SELECT event_id::text, extract(epoch FROM created_at) * 1e9 FROM outbox_events
WHERE event_id = ANY(?::uuid[])`, pgdialect.Array(ids))
	if err != nil {
		return "", err
	}
	var ms []float64
	for rows.Next() {
		var id string
		var ns float64
		if err := rows.Scan(&id, &ns); err != nil {
			_ = rows.Close()
			return "", err
		}
		ms = append(ms, (float64(consumed[id])-ns)/1e6)
	}
	if err := rows.Close(); err != nil {
		return "", err
	}
	return latencySummary(ms, len(consumed), "sampled still in the table", "sampled"), nil
}
