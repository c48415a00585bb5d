package relay

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// The benchmarks measure one scenario per run, side by side, and report their figures with
// b.ReportMetric; run them with -benchtime=1x against the dev servers:
//
//	go test -run '^$' -bench . -benchtime 1x ./relay/

const benchQueuePrefix = "bunbox_bench_"

func benchSetup(b *testing.B) (*bun.DB, asynq.RedisClientOpt, string, *asynq.Inspector) {
	b.Helper()
	db, _ := outboxtest.Schema(b)
	redis := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr(), PoolSize: 64}
	queue := benchQueuePrefix + randHex(6)
	ins := asynq.NewInspector(redis)
	b.Cleanup(func() {
		_ = ins.DeleteQueue(queue, true)
		_ = ins.Close()
	})
	return db, redis, queue, ins
}

// BenchmarkDrainBacklog drains a backlog of 100,000 rows with one relay and, on the same Redis with the
// same concurrency, enqueues as many of the same tasks with a bare asynq.Client (raw) and with an
// asynq.Client on the relay's auto-pipelined Redis client (raw_pipelined); it reports the rates, the
// relay's ratio to each, and the relay's peak heap. The three alternate in 10 segments of 10,000 so that
// all see the same load on a shared machine; the relay's backlog is the whole 100,000 rows from the start.
func BenchmarkDrainBacklog(b *testing.B) {
	const n = 100_000
	const segments = 10
	const concurrency = concurrencyDefault
	db, redis, queue, ins := benchSetup(b)
	ctx := context.Background()
	payload := []byte(`{"order_id":12345,"total":"99.90"}`)
	for range b.N {
		client := asynq.NewClient(redis)
		pclient, prdb, err := newClient(redis) // the relay's own: the same enqueues, auto-pipelined
		if err != nil {
			b.Fatal(err)
		}
		rawQueue := queue + "_raw"
		b.Cleanup(func() { _ = ins.DeleteQueue(rawQueue, true) })
		// enqueueRaw enqueues count tasks like the relay's (same type, payload, headers, TaskID, queue,
		// retention), concurrency at a time.
		enqueueRaw := func(client *asynq.Client, count int) time.Duration {
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range concurrency {
				wg.Go(func() {
					for next.Add(1) <= int64(count) {
						id := uuid.Must(uuid.NewV7()).String()
						task := asynq.NewTaskWithHeaders("bench.event", payload, map[string]string{
							wire.HeaderEventID:   id,
							wire.HeaderEventName: "bench.event",
							wire.HeaderCreatedAt: time.Now().UTC().Format(time.RFC3339Nano),
						})
						if _, err := client.EnqueueContext(ctx, task, asynq.TaskID(id), asynq.Queue(rawQueue),
							asynq.Retention(taskRetentionDefault)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			return time.Since(start)
		}

		if _, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload)
SELECT gen_random_uuid(), 'bench.event', ?, ? FROM generate_series(1, ?)`, queue, string(payload), n); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "VACUUM ANALYZE outbox_events"); err != nil {
			b.Fatal(err)
		}
		var cfg Config
		cfg.Concurrency, cfg.DisableNotify, cfg.PublishedRetention = concurrency, true, -1
		var segmentDone atomic.Int64
		segmentTarget := atomic.Int64{}
		var stopSegment atomic.Value // context.CancelFunc
		cfg.Observer.OnBatch = func(_ context.Context, ev BatchEvent) {
			if segmentDone.Add(int64(ev.Published)) >= segmentTarget.Load() {
				stopSegment.Load().(context.CancelFunc)()
			}
		}
		r, err := New(db, redis, cfg)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		baseHeap := ms.HeapInuse
		var peakHeap atomic.Uint64
		sampling := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Go(func() {
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-sampling:
					return
				case <-t.C:
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peakHeap.Load() {
						peakHeap.Store(ms.HeapInuse)
					}
				}
			}
		})

		var rawTime, pipedTime, relayTime time.Duration
		var rawCPU, pipedCPU, relayCPU cpuTimes
		var relayed int64
		srv := serverPIDs(ctx, db, redis.Addr)
		readCPU := func() cpuTimes { return readCPUOf(srv) }
		for seg := range segments {
			c0 := readCPU()
			rawTime += enqueueRaw(client, n/segments)
			c1 := readCPU()
			rawCPU = rawCPU.add(c1.sub(c0))
			pipedTime += enqueueRaw(pclient, n/segments)
			c2 := readCPU()
			pipedCPU = pipedCPU.add(c2.sub(c1))
			c1 = c2
			segCtx, cancel := context.WithCancel(ctx)
			stopSegment.Store(cancel)
			segmentDone.Store(0)
			segmentTarget.Store(min(int64(n/segments), n-relayed))
			if seg == segments-1 {
				segmentTarget.Store(n - relayed)
			}
			start := time.Now()
			if err := r.Run(segCtx); err != nil {
				b.Fatal(err)
			}
			relayTime += time.Since(start)
			relayCPU = relayCPU.add(readCPU().sub(c1))
			relayed += segmentDone.Load()
			cancel()
			if relayed >= n {
				break
			}
		}
		close(sampling)
		sampler.Wait()
		_ = r.Close()
		_ = client.Close()
		_ = prdb.Close()
		if info, err := ins.GetQueueInfo(queue); err != nil || info.Size != n {
			b.Fatalf("queue holds %v tasks (%v), want %d", info, err, n)
		}

		rawRate, pipedRate := n/rawTime.Seconds(), n/pipedTime.Seconds()
		relayRate := float64(relayed) / relayTime.Seconds()
		b.ReportMetric(rawRate, "raw_enqueues/s")
		b.ReportMetric(pipedRate, "raw_pipelined_enqueues/s")
		b.ReportMetric(relayRate, "relay_events/s")
		b.ReportMetric(relayRate/rawRate, "relay/raw")
		b.ReportMetric(relayRate/pipedRate, "relay/raw_pipelined")
		b.ReportMetric(float64(peakHeap.Load()-min(baseHeap, peakHeap.Load()))/(1<<20), "relay_peak_heap_MB")
		b.ReportMetric(float64(peakHeap.Load())/(1<<20), "process_peak_heap_MB")
		b.Logf("CPU µs per event, raw: go %.1f, redis %.1f, postgres %.1f; raw_pipelined: go %.1f, redis %.1f; relay: go %.1f, redis %.1f, postgres %.1f",
			rawCPU.self.Seconds()*1e6/n, rawCPU.redis.Seconds()*1e6/n, rawCPU.pg.Seconds()*1e6/n,
			pipedCPU.self.Seconds()*1e6/n, pipedCPU.redis.Seconds()*1e6/n,
			relayCPU.self.Seconds()*1e6/float64(relayed), relayCPU.redis.Seconds()*1e6/float64(relayed),
			relayCPU.pg.Seconds()*1e6/float64(relayed))
		if _, err := db.ExecContext(ctx, "TRUNCATE outbox_events"); err != nil {
			b.Fatal(err)
		}
		_ = ins.DeleteQueue(queue, true)
		_ = ins.DeleteQueue(rawQueue, true)
	}
}

// BenchmarkIdleLatency commits single-event transactions at 1,000 events/s for a few seconds and reports
// the commit-to-enqueued latency, woken by NOTIFY (the trigger of EnableNotifyTrigger) and by the
// adaptive poll alone.
func BenchmarkIdleLatency(b *testing.B) {
	for _, mode := range []struct {
		name   string
		notify bool
		cfg    Config
	}{
		{"Notify", true, Config{}},
		{"AdaptivePoll", false, Config{DisableNotify: true}},
		{"AdaptivePoll1ms", false, Config{DisableNotify: true, MinPollInterval: time.Millisecond}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			for range b.N {
				p50, p99, pmax := measureLatency(b, mode.notify, mode.cfg, 1000, 3*time.Second)
				b.ReportMetric(p50, "p50_ms")
				b.ReportMetric(p99, "p99_ms")
				b.ReportMetric(pmax, "max_ms")
			}
		})
	}
}

// latencyEnqueuer notes when each task reached Redis.
type latencyEnqueuer struct {
	*asynq.Client
	done sync.Map // task id -> time.Time
}

func (e *latencyEnqueuer) EnqueueContext(ctx context.Context, t *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	info, err := e.Client.EnqueueContext(ctx, t, opts...)
	if err == nil {
		e.done.Store(info.ID, time.Now())
	}
	return info, err
}

func measureLatency(b *testing.B, notify bool, cfg Config, rate int, d time.Duration) (p50, p99, pmax float64) {
	b.Helper()
	db, redis, queue, _ := benchSetup(b)
	ctx := context.Background()
	if notify {
		if err := EnableNotifyTrigger(ctx, db, model.Location{}); err != nil {
			b.Fatal(err)
		}
	}
	client := asynq.NewClient(redis)
	defer client.Close()
	enq := &latencyEnqueuer{Client: client}
	cfg.Enqueuer = enq
	cfg.PublishedRetention = -1
	var listening atomic.Bool
	cfg.Logger = slog.New(flagHandler{msg: "listening for notifications", flag: &listening})
	r, err := New(db, nil, cfg)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			b.Error(err)
		}
	}()
	if notify { // the trigger's notifications reach the relay once its LISTEN is confirmed
		outboxtest.WaitFor(b, 10*time.Second, "the listener", func() bool { return listening.Load() })
	}
	// Warm up: a first burst opens the connections and grows the goroutine stacks a long-running relay
	// has, so that the run measures an idle relay, not a cold process.
	warm := insertEvents(b, db, queue, 200)
	outboxtest.WaitFor(b, 30*time.Second, "the warm-up events enqueued", func() bool {
		_, ok := enq.done.Load(warm[len(warm)-1].EventID.String())
		return ok
	})
	time.Sleep(1500 * time.Millisecond) // let the poll settle to idle: the scenario is an idle relay

	// Two producers, each committing one event per transaction on its own schedule.
	const producers = 2
	total := int(d.Seconds() * float64(rate))
	committed := make([]map[string]time.Time, producers)
	var wg sync.WaitGroup
	start := time.Now()
	for p := range producers {
		committed[p] = make(map[string]time.Time, total/producers)
		wg.Go(func() {
			interval := time.Duration(producers) * time.Second / time.Duration(rate)
			for i := range total / producers {
				if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
					time.Sleep(wait) // pacing the load, not waiting for a result
				}
				ev, err := model.NewEvent("bench.latency", map[string]int{"i": i}, model.WithQueue(queue))
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := db.NewInsert().Model(ev).Exec(ctx); err != nil {
					b.Error(err)
					return
				}
				committed[p][ev.EventID.String()] = time.Now()
			}
		})
	}
	wg.Wait()
	outboxtest.WaitFor(b, 30*time.Second, "every event enqueued", func() bool {
		for _, m := range committed {
			for id := range m {
				if _, ok := enq.done.Load(id); !ok {
					return false
				}
			}
		}
		return true
	})
	lat := make([]float64, 0, total)
	slowAt := map[int]int{} // second of the run -> events over 10 ms, to tell a stall from a steady tail
	for _, m := range committed {
		for id, c := range m {
			e, _ := enq.done.Load(id)
			l := max(e.(time.Time).Sub(c), 0).Seconds() * 1000
			lat = append(lat, l)
			if l > 10 {
				slowAt[int(c.Sub(start)/(100*time.Millisecond))]++
			}
		}
	}
	if len(slowAt) > 0 {
		b.Logf("events over 10 ms, by 100 ms slice of the run: %v", slowAt)
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.Logf("%d events at %d/s: p50 %.2f ms, p99 %.2f ms, max %.2f ms", len(lat), rate, q(0.5), q(0.99), lat[len(lat)-1])
	return q(0.5), q(0.99), lat[len(lat)-1]
}

// BenchmarkNotifyCommitCost measures what the NOTIFY trigger costs concurrent writers: single-row
// transactions from 8 writers for 2 s without, then with the trigger, and the ratio.
func BenchmarkNotifyCommitCost(b *testing.B) {
	db, _, queue, _ := benchSetup(b)
	ctx := context.Background()
	measure := func() float64 {
		const writers = 8
		var commits atomic.Int64
		deadline := time.Now().Add(2 * time.Second)
		var wg sync.WaitGroup
		for range writers {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					ev, _ := model.NewEvent("bench.commit", map[string]int{}, model.WithQueue(queue))
					if err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
						_, err := tx.NewInsert().Model(ev).Exec(ctx)
						return err
					}); err != nil {
						b.Error(err)
						return
					}
					commits.Add(1)
				}
			})
		}
		wg.Wait()
		return float64(commits.Load()) / 2
	}
	for range b.N {
		without := measure()
		if err := EnableNotifyTrigger(ctx, db, model.Location{}); err != nil {
			b.Fatal(err)
		}
		with := measure()
		if err := DisableNotifyTrigger(ctx, db, model.Location{}); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(without, "commits/s_plain")
		b.ReportMetric(with, "commits/s_notify")
		b.ReportMetric(with/without, "notify/plain")
		b.Logf("8 writers: %.0f commits/s plain, %.0f with the NOTIFY trigger (ratio %.2f)", without, with, with/without)
	}
}

// flagHandler sets flag when a log record with message msg goes by.
type flagHandler struct {
	msg  string
	flag *atomic.Bool
}

func (h flagHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h flagHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "bunbox relay: "+h.msg {
		h.flag.Store(true)
	}
	return nil
}
func (h flagHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h flagHandler) WithGroup(string) slog.Handler      { return h }

// cpuTimes is CPU time used by this process and by the redis-server and postgres processes: those of the
// dev servers the benchmark uses when serverPIDs found them, otherwise all of them on the machine (an
// approximation when other servers run too).
type cpuTimes struct{ self, redis, pg time.Duration }

func (a cpuTimes) add(b cpuTimes) cpuTimes {
	return cpuTimes{a.self + b.self, a.redis + b.redis, a.pg + b.pg}
}
func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{a.self - b.self, a.redis - b.redis, a.pg - b.pg}
}

// servers names the processes readCPUOf counts: the postmaster (and its children) and the redis-server
// of the benchmark's own servers; zero counts every such process on the machine.
type servers struct{ postmaster, redis int }

// serverPIDs finds the postmaster behind db (the parent of a backend) and the redis-server behind redis
// (INFO's process_id); zero for what it cannot find.
func serverPIDs(ctx context.Context, db *bun.DB, redisAddr string) servers {
	var s servers
	var backend int
	if err := db.NewRaw("SELECT pg_backend_pid()").Scan(ctx, &backend); err == nil {
		s.postmaster = procStat(backend).ppid
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				s.redis, _ = strconv.Atoi(v)
			}
		}
	}
	return s
}

// stat is what readCPUOf reads of /proc/<pid>/stat.
type stat struct {
	comm      string
	ppid      int
	cpu       time.Duration // utime and stime
	children  time.Duration // cutime and cstime: of the children that exited and were waited for
	malformed bool
}

func procStat(pid int) stat {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{malformed: true}
	}
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return stat{malformed: true}
	}
	fields := strings.Fields(string(b[close+2:]))
	if len(fields) < 15 {
		return stat{malformed: true}
	}
	ppid, _ := strconv.Atoi(fields[1])
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(fields[i], 10, 64)
		return time.Duration(n) * 10 * time.Millisecond // USER_HZ = 100
	}
	return stat{comm: string(b[open+1 : close]), ppid: ppid, cpu: tick(11) + tick(12), children: tick(13) + tick(14)}
}

func readCPU() cpuTimes { return readCPUOf(servers{}) }

func readCPUOf(srv servers) cpuTimes {
	var c cpuTimes
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		pid, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, "/proc/"), "/stat"))
		st := procStat(pid)
		if st.malformed {
			continue
		}
		switch {
		case strings.HasPrefix(st.comm, "redis-server") && (srv.redis == 0 || pid == srv.redis):
			c.redis += st.cpu
		case strings.HasPrefix(st.comm, "postgres") && srv.postmaster == 0:
			c.pg += st.cpu
		case pid == srv.postmaster: // with its backends that exited since it started
			c.pg += st.cpu + st.children
		case st.ppid == srv.postmaster && srv.postmaster != 0:
			c.pg += st.cpu
		}
	}
	return c
}
