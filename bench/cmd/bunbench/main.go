// Command bunbench runs bunbox side by side with what a user would otherwise write (a hand-written outbox
// INSERT, a naive SKIP LOCKED relay, bare asynq) and with its peers (Watermill's SQL publisher and
// Forwarder, River), against the dev services, and prints one table of medians over several rounds. Every
// ratio is taken between arms measured in the same round, so that the load the other processes of a shared
// machine put on it falls on both sides of the ratio.
//
//	eval "$(scripts/devservices.sh env)"
//	go run ./cmd/bunbench                     # in bench/: the full run (~15 min)
//	go run ./cmd/bunbench -quick              # a smoke run of every part (~1 min)
//	go run ./cmd/bunbench -parts tax -rounds 7 -dur 3s
//
// Two parts are left out of the default run, for they take half an hour and a 10 M-row table (issue 18, flat at
// scale): sustain writes 5,000 events/s for 30 min with the relay in another process at its default Config and
// prints a row every 5 min; keptdrain drains the same backlog with 10 M published rows kept and with none. Each
// runs the relay with its zero Config on a freshly migrated outbox, where the stream is on by default ("bunbox
// relay"), and then the same relay after relay.DisableStream, on the per-row path ("bunbox per-row"); -arms
// picks one.
//
//	go run ./cmd/bunbench -parts sustain -sustain-batch 10 -arms 'bunbox relay'
//	go run ./cmd/bunbench -parts keptdrain -rounds 3 -drain-cap 5m
//
// The arm "bunbox per-row" is in the drain part as well, and in the tax part ("bunbox Record, per-row") and
// the lull part ("bunbox per-row, default Config"); every other bunbox arm runs on the stream, the default. A
// stream drain that does not finish within -drain-cap fails the run with the stream's state (a relay without
// the stream round never delivers it): at once in keptdrain, at the end of the run in drain (the other arms'
// figures are printed first).
// BUNBENCH_DRAIN_PROFILE=DIR writes a CPU profile of this process over each drain arm's drain alone (one file
// per arm and round; not with -cpuprofile).
//
// It reads TEST_DATABASE_URL and TEST_REDIS_ADDR, as the tests do. Every run works in schemas and asynq
// queues of its own and drops them at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

// options are the command's flags.
type options struct {
	parts      []string      // which parts run: tax, drain, e2e, growth, memory, lull, sustain, keptdrain
	rounds     int           // rounds of tax and drain; each figure is the median over them
	dur        time.Duration // how long one tax arm runs in one round
	drainN     int           // events in a drain backlog
	drainCap   time.Duration // the longest one drain arm may take; a capped arm reports its rate so far
	rate       int           // events per second of the end-to-end run at a fixed rate
	e2eDur     time.Duration // how long each end-to-end load runs
	growth     []int         // published rows kept, for the growth part
	growthDead int           // dead rows kept, for the growth part's last case
	growthN    int           // pending events drained in each growth case
	arms       string        // a comma-separated filter on arm names (substring match); empty runs all
	quick      bool          // a smoke run: fewer, smaller arms
	lull       time.Duration // the quiet spell before each sample of the lull part
	lullN      int           // samples per relay of the lull part
	cpuProfile string

	sustainRate           int           // events per second the sustain part writes
	sustainDur            time.Duration // how long the sustain part writes
	sustainEvery          time.Duration // a row of the sustain part per this much time
	sustainWriters        int           // writers of the sustain part
	sustainBatch          int           // events per transaction of the sustain part
	pgLog                 string        // the server log the sustain part reads autovacuums from
	aofRewrite            bool          // sustain: leave Redis's automatic AOF rewrite on
	keptRows              int           // published rows kept in the keptdrain part's table
	holdXmin              time.Duration // sustain: how long a transaction holds the xmin horizon (0: none)
	holdAfter             time.Duration // sustain: when, after the writers start, that transaction begins
	holdXid               bool          // sustain: the holding transaction takes a transaction id (it wrote)
	sustainRetention      time.Duration // sustain: the relay's PublishedRetention (0: its default)
	sustainConsume        bool          // sustain: an asynq server with a no-op handler drains the queue
	sustainConsumers      int           // sustain: the Concurrency of each of those servers
	sustainConsumeServers int           // sustain: how many asynq servers drain the queue
	sustainTaskRetention  time.Duration // sustain: the relay's TaskRetention (0: 2m with -sustain-consume, else its default)
	keptN                 int           // pending events drained in each keptdrain round
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		os.Exit(runChild(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == childRelayCommand {
		os.Exit(runChildRelay(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == childConsumeCommand {
		os.Exit(runChildConsume(os.Args[2:]))
	}
	var o options
	var parts, growth string
	flag.StringVar(&parts, "parts", "tax,drain,e2e,growth,memory,lull", "the parts to run, comma-separated")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds of the tax and drain parts (each figure is the median)")
	flag.DurationVar(&o.dur, "dur", 2*time.Second, "how long each tax arm runs in each round")
	flag.IntVar(&o.drainN, "drain-n", 100_000, "events in each drain backlog")
	flag.DurationVar(&o.drainCap, "drain-cap", 10*time.Second, "the longest a drain arm may take (a capped arm reports its rate so far)")
	flag.IntVar(&o.rate, "rate", 1000, "events per second of the end-to-end run at a fixed rate")
	flag.DurationVar(&o.e2eDur, "e2e-dur", 5*time.Second, "how long each end-to-end load runs")
	flag.StringVar(&growth, "growth", "0,100000,1000000", "published rows kept in the growth part, comma-separated")
	flag.IntVar(&o.growthDead, "growth-dead", 100_000, "dead rows kept in the growth part's last case (0 skips it)")
	flag.IntVar(&o.growthN, "growth-n", 100_000, "pending events drained in each growth case")
	flag.DurationVar(&o.lull, "lull", 4*time.Second, "the quiet spell before each sample of the lull part")
	flag.IntVar(&o.lullN, "lull-n", 8, "samples per relay of the lull part")
	flag.StringVar(&o.arms, "arms", "", "run only the arms whose names contain one of these comma-separated words")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	flag.IntVar(&o.sustainRate, "sustain-rate", 5000, "sustain: events per second written")
	flag.DurationVar(&o.sustainDur, "sustain-dur", 30*time.Minute, "sustain: how long the writers write")
	flag.DurationVar(&o.sustainEvery, "sustain-every", 5*time.Minute, "sustain: a row per this much time")
	flag.IntVar(&o.sustainWriters, "sustain-writers", 32, "sustain: writers, each committing one transaction at a time")
	flag.IntVar(&o.sustainBatch, "sustain-batch", 1, "sustain: events per transaction (1: an event per business transaction)")
	flag.BoolVar(&o.aofRewrite, "sustain-aof-rewrite", true, "sustain: leave Redis's automatic AOF rewrite on (false: off for the run, put back after)")
	flag.StringVar(&o.pgLog, "pg-log", "", "sustain: the server log to read autovacuums from (default: server.log in the data directory)")
	flag.DurationVar(&o.holdXmin, "sustain-hold-xmin", 0, "sustain: a transaction holds the xmin horizon this long (0: none)")
	flag.DurationVar(&o.holdAfter, "sustain-hold-after", 2*time.Minute, "sustain: the holding transaction begins this long after the writers")
	flag.BoolVar(&o.holdXid, "sustain-hold-xid", true, "sustain: the holding transaction takes a transaction id, as one that wrote and stays open")
	flag.DurationVar(&o.sustainRetention, "sustain-retention", 0, "sustain: the relay's PublishedRetention for the run (0: its default, 7 days)")
	flag.BoolVar(&o.sustainConsume, "sustain-consume", false, "sustain: an asynq server (no-op handler) in a process of its own drains the queue")
	flag.IntVar(&o.sustainConsumers, "sustain-consumers", 16, "sustain: the Concurrency of each of -sustain-consume's servers")
	flag.IntVar(&o.sustainConsumeServers, "sustain-consume-servers", 4, "sustain: how many asynq servers -sustain-consume runs (each takes its tasks one Redis round trip at a time)")
	flag.DurationVar(&o.sustainTaskRetention, "sustain-task-retention", 0, "sustain: the relay's TaskRetention for the run (0: 2m with -sustain-consume, so Redis keeps 2 minutes of completed tasks; else its default, 24h)")
	flag.IntVar(&o.keptRows, "kept-rows", 10_000_000, "keptdrain: published rows kept in the table")
	flag.IntVar(&o.keptN, "kept-n", 50_000, "keptdrain: pending events drained per round")
	flag.BoolVar(&o.quick, "quick", false, "a smoke run: 2 rounds, short arms, small backlogs")
	flag.Parse()
	if o.quick { // smaller defaults; a flag given on the command line still wins
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, value := range map[string]string{"rounds": "2", "dur": "300ms", "drain-n": "5000", "drain-cap": "10s",
			"e2e-dur": "1s", "growth-n": "2000", "growth-dead": "10000", "lull": "1s", "lull-n": "3"} {
			if !set[name] {
				_ = flag.Set(name, value)
			}
		}
		if !set["growth"] {
			growth = "0,10000"
		}
		checkpointBacklog = false
	}
	o.parts = strings.Split(parts, ",")
	for _, s := range strings.Split(growth, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil {
			fatalf("-growth: %q is not a number", s)
		}
		o.growth = append(o.growth, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fatalf("%v", err)
	}
}

func run(ctx context.Context, o options) error {
	env, err := newEnv(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	if o.cpuProfile != "" {
		stopProfile, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	fmt.Printf("bunbench: %s, GOMAXPROCS %d, %d rounds, tax arms %s each, drain %d events\n",
		time.Now().UTC().Format(time.RFC3339), gomaxprocs(), o.rounds, o.dur, o.drainN)
	start := time.Now()
	for _, part := range o.parts {
		t0 := time.Now()
		switch part {
		case "tax":
			err = runTax(ctx, env, o)
		case "drain":
			err = runDrain(ctx, env, o)
		case "e2e":
			err = runE2E(ctx, env, o)
		case "growth":
			err = runGrowth(ctx, env, o)
		case "memory":
			err = runMemory(ctx, env, o)
		case "lull":
			err = runLull(ctx, env, o)
		case "sustain":
			err = runSustain(ctx, env, o)
		case "keptdrain":
			err = runKeptDrain(ctx, env, o)
		default:
			err = fmt.Errorf("-parts: unknown part %q (tax, drain, e2e, growth, memory, lull, sustain, keptdrain)", part)
		}
		env.closeConns()
		if err != nil {
			return fmt.Errorf("%s: %w", part, err)
		}
		fmt.Printf("(%s took %s)\n\n", part, time.Since(t0).Round(time.Second))
	}
	fmt.Printf("bunbench: done in %s\n", time.Since(start).Round(time.Second))
	if len(env.failures) > 0 {
		return fmt.Errorf("%d failure(s):\n- %s", len(env.failures), strings.Join(env.failures, "\n- "))
	}
	return nil
}

// want reports whether the arm named name is selected by -arms.
func (o options) want(name string) bool {
	if o.arms == "" {
		return true
	}
	for _, w := range strings.Split(o.arms, ",") {
		if w != "" && strings.Contains(name, w) {
			return true
		}
	}
	return false
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spread(xs []float64) string {
	if len(xs) < 2 {
		return ""
	}
	return fmt.Sprintf("%.2f–%.2f", slices.Min(xs), slices.Max(xs))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bunbench: "+format+"\n", args...)
	os.Exit(1)
}

// table prints rows as a Markdown table.
func table(header []string, rows [][]string) {
	fmt.Println("| " + strings.Join(header, " | ") + " |")
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	fmt.Println("| " + strings.Join(sep, " | ") + " |")
	for _, r := range rows {
		fmt.Println("| " + strings.Join(r, " | ") + " |")
	}
}
