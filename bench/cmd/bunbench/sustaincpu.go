package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The sustain part's account of where the machine went in each interval: the CPU of the relay's process,
// of PostgreSQL and of Redis, and the background saves of Redis (an AOF rewrite or an RDB save forks the
// server and writes every key again: with the run's tasks kept in Redis, gigabytes on the same two cores).
// It settles whether an interval in which the relay fell behind is one in which it had the CPU.

// cpuSampler reads the counters of sustainCPU.
type cpuSampler struct {
	relay, postmaster, redis int // pids; 0: not found, not measured
	consumer                 int // the pid of -sustain-consume's process; 0: none
	rdb                      *redis.Client
	forkSecs                 atomic.Int64 // seconds in which Redis had a background save in progress
}

// sustainCPU is what the sampler read at one moment: CPU time used so far by each server, counting its
// processes that ended (the parent's cutime and cstime: PostgreSQL's backends and autovacuum workers,
// Redis's forks) and those still running.
type sustainCPU struct {
	relay, pg, redis time.Duration
	consumer         time.Duration
	forkSecs         int64
	aofRewrites      int64 // INFO persistence aof_rewrites
	rdbSaves         int64 // INFO persistence rdb_saves
}

func newCPUSampler(m *meter, relayPID int, rdb *redis.Client) *cpuSampler {
	return &cpuSampler{relay: relayPID, postmaster: m.postmaster, redis: m.redis, rdb: rdb}
}

// watchForks counts, once a second until ctx ends, the seconds in which Redis has a background save in
// progress.
func (c *cpuSampler) watchForks(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p := c.persistence(ctx)
		if p["aof_rewrite_in_progress"] == 1 || p["rdb_bgsave_in_progress"] == 1 {
			c.forkSecs.Add(1)
		}
	}
}

// persistence is Redis's INFO persistence, its integer fields by name.
func (c *cpuSampler) persistence(ctx context.Context) map[string]int64 {
	info, err := c.rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return nil
	}
	p := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				p[k] = n
			}
		}
	}
	return p
}

// read reads the counters now.
func (c *cpuSampler) read(ctx context.Context) sustainCPU {
	s := sustainCPU{forkSecs: c.forkSecs.Load()}
	if c.relay != 0 {
		s.relay = procStat(c.relay).cpu
	}
	if c.consumer != 0 {
		s.consumer = procStat(c.consumer).cpu
	}
	p := c.persistence(ctx)
	s.aofRewrites, s.rdbSaves = p["aof_rewrites"], p["rdb_saves"]
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		pid, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/stat"))
		st := procStat(pid)
		switch {
		case st.malformed:
		case c.postmaster != 0 && pid == c.postmaster:
			s.pg += st.cpu + st.children
		case c.postmaster != 0 && st.ppid == c.postmaster:
			s.pg += st.cpu
		case c.redis != 0 && pid == c.redis:
			s.redis += st.cpu + st.children
		case c.redis != 0 && st.ppid == c.redis:
			s.redis += st.cpu
		}
	}
	return s
}

// cpuColumns are the sustain row's columns of the interval from a to b, secs long.
func cpuColumns(a, b sustainCPU, secs float64) []string {
	pct := func(d time.Duration) string { return fmt.Sprintf("%.0f", 100*d.Seconds()/secs) }
	return []string{
		pct(b.relay-a.relay) + " / " + pct(b.consumer-a.consumer) + " / " + pct(b.pg-a.pg) + " / " + pct(b.redis-a.redis),
		fmt.Sprintf("%d / %d s", b.aofRewrites-a.aofRewrites+b.rdbSaves-a.rdbSaves, b.forkSecs-a.forkSecs),
	}
}

// cpuHeader and cpuNote go with cpuColumns.
var cpuHeader = []string{"CPU % relay / consumer / PostgreSQL / Redis", "Redis saves n / s"}

const cpuNote = `CPU %%: CPU time in the interval as a percentage of one core (the machine has %d), of the relay's
process, of the consumer's (-sustain-consume; 0 without), of every PostgreSQL process (autovacuum included) and of Redis (its forks included), from /proc;
Redis saves: AOF rewrites and RDB saves that ended in the interval (INFO persistence), and the seconds in
which one was in progress (sampled each second).`

// setAOFRewrite turns Redis's automatic AOF rewrite off (on false) for the run, and returns the function
// that puts the setting back.
func setAOFRewrite(ctx context.Context, rdb *redis.Client, on bool) (restore func(), err error) {
	if on {
		return func() {}, nil
	}
	was, err := rdb.ConfigGet(ctx, "auto-aof-rewrite-percentage").Result()
	if err != nil {
		return nil, fmt.Errorf("read auto-aof-rewrite-percentage: %w", err)
	}
	if err := rdb.ConfigSet(ctx, "auto-aof-rewrite-percentage", "0").Err(); err != nil {
		return nil, fmt.Errorf("turn the AOF rewrite off: %w", err)
	}
	return func() {
		if v, ok := was["auto-aof-rewrite-percentage"]; ok {
			if err := rdb.ConfigSet(context.WithoutCancel(ctx), "auto-aof-rewrite-percentage", v).Err(); err != nil {
				fmt.Fprintf(os.Stderr, "bunbench: put auto-aof-rewrite-percentage back to %s: %v\n", v, err)
			}
		}
	}, nil
}
