package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"
)

// What one drain arm spends per event, measured around the drain alone (not the fill):
//   - Go: the CPU time of this process (getrusage RUSAGE_SELF), which runs the relay or the asynq client;
//   - PostgreSQL: the CPU time of the dev server's postmaster and every live process under it but
//     autovacuum's (backends, WAL writer, checkpointer, background writer), from /proc/<pid>/stat
//     utime+stime. A process that exits between two readings is not counted: the arms keep their
//     connections open for the whole drain, and none of their statements runs in parallel workers;
//   - Redis: the CPU time of the redis-server process behind TEST_REDIS_ADDR;
//   - WAL: pg_current_wal_lsn() before and after, in bytes.
// The servers are found by pid (the parent of a backend, INFO's process_id), so the other servers on a
// shared machine are not counted. /proc counts in ticks of 10 ms: a figure per event is good to about
// 10 ms over the events of the drain.

// meter reads the counters of cost.
type meter struct {
	admin      *bun.DB
	postmaster int // 0 when not found: PostgreSQL's CPU is then not measured
	redis      int // likewise for Redis
}

// reading is the counters at one moment.
type reading struct {
	self, pg, redis time.Duration
	lsn             string
	at              time.Time
	procs           map[int]stat // with BUNBENCH_CPU_DEBUG set: each PostgreSQL process
}

// cost is what was spent between two readings.
type cost struct {
	goCPU, pgCPU, redisCPU time.Duration
	wal                    int64
	elapsed                time.Duration
}

func newMeter(ctx context.Context, admin *bun.DB, redisAddr string) *meter {
	m := &meter{admin: admin}
	var backend int
	if err := admin.NewRaw("SELECT pg_backend_pid()").Scan(ctx, &backend); err == nil {
		m.postmaster = procStat(backend).ppid
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				m.redis, _ = strconv.Atoi(v)
			}
		}
	}
	return m
}

func (m *meter) read(ctx context.Context) (reading, error) {
	r := reading{at: time.Now()}
	if err := m.admin.NewRaw("SELECT pg_current_wal_lsn()::text").Scan(ctx, &r.lsn); err != nil {
		return r, err
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	r.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if m.redis != 0 {
		r.redis = procStat(m.redis).cpu
	}
	if m.postmaster == 0 {
		return r, nil
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	if os.Getenv("BUNBENCH_CPU_DEBUG") != "" {
		r.procs = map[int]stat{}
	}
	for _, f := range stats {
		pid, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/stat"))
		switch st := procStat(pid); {
		case st.malformed:
		case pid == m.postmaster:
			r.pg += st.cpu
			if r.procs != nil {
				r.procs[pid] = st
			}
		case st.ppid == m.postmaster && !autovacuum(pid):
			r.pg += st.cpu
			if r.procs != nil {
				r.procs[pid] = st
			}
		}
	}
	return r, nil
}

// since is the cost from r0 to now.
func (m *meter) since(ctx context.Context, r0 reading) (cost, error) {
	r1, err := m.read(ctx)
	if err != nil {
		return cost{}, err
	}
	c := cost{goCPU: r1.self - r0.self, pgCPU: r1.pg - r0.pg, redisCPU: r1.redis - r0.redis, elapsed: r1.at.Sub(r0.at)}
	for pid, st := range r1.procs {
		if d := st.cpu - r0.procs[pid].cpu; d > 0 {
			fmt.Fprintf(os.Stderr, "bunbench: cpu: %d %s %s\n", pid, st.comm, d)
		}
	}
	err = m.admin.NewRaw("SELECT pg_wal_lsn_diff(?::pg_lsn, ?::pg_lsn)::bigint", r1.lsn, r0.lsn).Scan(ctx, &c.wal)
	return c, err
}

// probe measures one arm of one round: begin when its drain starts, end when the last event is in
// Redis, then optionally vacuum, the cost the drain left for later.
type probe struct {
	m       *meter
	name    string // the arm, for its CPU profile (BUNBENCH_DRAIN_PROFILE)
	round   int
	stopCPU func()
	r0      reading
	began   bool
	drain   *cost
	vacuum  *cost
	dups    int64 // enqueues that met a task already there (asynq.ErrTaskIDConflict), where the arm counts them
}

// begin and end are no-ops on a nil probe (the growth and memory parts drain without one).
func (p *probe) begin(ctx context.Context) error {
	if p == nil {
		return nil
	}
	var err error
	p.r0, err = p.m.read(ctx)
	p.began = err == nil
	if dir := os.Getenv("BUNBENCH_DRAIN_PROFILE"); dir != "" && err == nil && p.name != "" {
		// A CPU profile of this process over the drain alone, one file per arm and round.
		name := strings.NewReplacer(" ", "_", ",", "", "(", "", ")", "").Replace(p.name)
		p.stopCPU, err = startCPUProfile(filepath.Join(dir, fmt.Sprintf("drain-%s-%d.pprof", name, p.round)))
	}
	return err
}

func (p *probe) end(ctx context.Context) error {
	if p == nil || !p.began {
		return nil
	}
	if p.stopCPU != nil {
		p.stopCPU()
		p.stopCPU = nil
	}
	c, err := p.m.since(ctx, p.r0)
	if err == nil {
		p.drain = &c
	}
	return err
}

// vacuumAfter runs VACUUM on table in db (the rows the drain made dead) and records what it cost.
func (p *probe) vacuumAfter(ctx context.Context, db bun.IDB, table string) error {
	if p == nil || !checkpointBacklog { // a -quick run skips it
		return nil
	}
	r0, err := p.m.read(ctx)
	if err != nil {
		return err
	}
	// PARALLEL 0: the leader does all of it, so that no exited worker's CPU goes uncounted.
	if _, err := db.ExecContext(ctx, "VACUUM (PARALLEL 0) "+table); err != nil {
		return err
	}
	c, err := p.m.since(ctx, r0)
	if err == nil {
		p.vacuum = &c
	}
	return err
}

// autovacuum reports whether PostgreSQL process pid is an autovacuum worker or launcher: their work on
// whatever tables the server picks (the catalogs churned by the run's CREATE and DROP, other arms'
// tables) is not the arm's; the cleanup an arm leaves is measured by probe.vacuumAfter instead.
func autovacuum(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(b, []byte("autovacuum"))
}

// stat is what the meter reads of /proc/<pid>/stat.
type stat struct {
	comm      string
	ppid      int
	cpu       time.Duration // utime and stime
	children  time.Duration // cutime and cstime: of the children it waited for
	malformed bool
}

func procStat(pid int) stat {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{malformed: true}
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 > len(b) {
		return stat{malformed: true}
	}
	fields := strings.Fields(string(b[end+2:]))
	if len(fields) < 15 {
		return stat{malformed: true}
	}
	ppid, _ := strconv.Atoi(fields[1])
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(fields[i], 10, 64)
		return time.Duration(n) * 10 * time.Millisecond // USER_HZ = 100
	}
	return stat{comm: string(b[open+1 : end]), ppid: ppid, cpu: tick(11) + tick(12), children: tick(13) + tick(14)}
}

// loadAverage is /proc/loadavg's first three figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
