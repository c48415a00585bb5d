package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/uptrace/bun"
)

// claimSQL is the relay's claim (relay/claim.go: its columns and its conditions), timed on its own.
const claimSQL = `SELECT id, event_id, event_name, queue, payload, metadata, created_at, attempts,
  process_at, max_retry, coalesce(timeout_ns, 0), deadline, coalesce(task_group, ''), coalesce(retention_ns, 0),
  coalesce(ordering_key, ''), payload_encoded
FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= now())
ORDER BY id
LIMIT 500
FOR UPDATE SKIP LOCKED`

// claimTime runs the claim 21 times, each in a transaction rolled back, and returns the median in ms.
func claimTime(ctx context.Context, db *bun.DB) (float64, error) {
	return medianQueryTime(ctx, db, claimSQL)
}

var errRollback = fmt.Errorf("rollback")

// runGrowth drains growthN events with the relay at its zero Config (the stream, the default) while the
// table keeps delivered (or dead) rows, and times the stream round's read alone.
func runGrowth(ctx context.Context, e *env, o options) error {
	fmt.Printf("## Growth: the relay with rows kept in the table (%d pending events drained per case)\n\n", o.growthN)
	type growthCase struct {
		name      string
		published int
		dead      int
	}
	var cases []growthCase
	for _, n := range o.growth {
		cases = append(cases, growthCase{fmt.Sprintf("%d published rows kept", n), n, 0})
	}
	if o.growthDead > 0 {
		cases = append(cases, growthCase{fmt.Sprintf("%d dead rows kept", o.growthDead), 0, o.growthDead})
	}
	var rows [][]string
	for _, c := range cases {
		db, _, err := e.schema(ctx, 20, true)
		if err != nil {
			return err
		}
		t0 := time.Now()
		for done := 0; done < c.published; done += 100_000 {
			// Streamed rows (the stream's defaults), created over the 7 days of PublishedRetention up to 2 hours
			// ago, as keptdrain's rows: out of the reconciler's 1 h window (passCursor below records the time
			// mark of that). Their tasks are not in Redis, so rows delivered within the window would be a Redis
			// data loss to the relay's first reconciler pass, which requeues every one it sees: the drain would
			// move them again besides its own.
			if _, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload, created_at)
SELECT gen_random_uuid(), 'bench.old', 'default', ?, t - interval '5 ms'
FROM generate_series(?::bigint, ?::bigint) g,
  LATERAL (SELECT now() - interval '2 hours' - interval '166 hours' * (1 - g::float8 / ?) AS t) s`,
				string(drainPayload), done+1, min(done+100_000, c.published), c.published); err != nil {
				return err
			}
		}
		if c.dead > 0 {
			if _, err := db.ExecContext(ctx, `INSERT INTO outbox_events (event_id, event_name, queue, payload, attempts, last_error, dead_at, published_at)
SELECT gen_random_uuid(), 'bench.dead', 'default', ?, 10, 'bench: dead', now(), NULL FROM generate_series(1, ?)`, string(drainPayload), c.dead); err != nil {
				return err
			}
		}
		if err := passCursor(ctx, db, int64(c.published)); err != nil {
			return err
		}
		fill := time.Since(t0)
		// As on a table that has lived with its rows: vacuumed and analyzed, and the fill's WAL checkpointed,
		// so that neither an autovacuum nor a checkpoint of the fill runs during the drain (keptdrain does
		// the same); the empty table gets the same.
		if err := execAll(ctx, db, "VACUUM ANALYZE outbox_events", "CHECKPOINT"); err != nil {
			return err
		}
		q := e.queue("growth")
		if err := fillStream(ctx, db, q, o.growthN); err != nil {
			return err
		}
		claim, err := streamReadTime(ctx, db)
		if err != nil {
			return err
		}
		rate, capped, err := relayDrain(ctx, db, e.redis, o.growthN, o.drainCap, nil)
		if err != nil {
			return err
		}
		e.dropQueue(q)
		var size int64
		_ = db.NewRaw("SELECT pg_total_relation_size('outbox_events')").Scan(ctx, &size)
		note := ""
		if capped {
			note = " (capped)"
		}
		rows = append(rows, []string{c.name, fmt.Sprintf("%.0f%s", rate, note), fmt.Sprintf("%.2f", claim),
			fmt.Sprintf("%.0f", float64(size)/(1<<20)), fill.Round(time.Second).String()})
		if _, err := db.ExecContext(ctx, "DROP TABLE outbox_events"); err != nil { // free the space at once
			return err
		}
	}
	table([]string{"table holds", "drain events/s", "the stream's read of 500 ms (median of 21)", "table + indexes MB", "time to fill"}, rows)
	fmt.Println("\nOne run per case, the relay at its zero Config on a freshly migrated outbox (the stream on); the kept published rows are " +
		"streamed rows the cursor has passed, the dead rows were handed to the per-row path; the backlog is streamed (transactions of " +
		"1,000 events); the read is the stream round's, timed in a transaction rolled back.")
	return nil
}

const childCommand = "-child-drain"

// runMemory drains a backlog with the relay in a process of its own and reports that process's peak RSS.
func runMemory(ctx context.Context, e *env, o options) error {
	fmt.Printf("## Memory: the relay's peak RSS while draining %d events\n\n", o.drainN)
	db, schema, err := e.schema(ctx, 2, true)
	if err != nil {
		return err
	}
	q := e.queue("memory")
	defer e.dropQueue(q)
	if err := fillStream(ctx, db, q, o.drainN); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe, childCommand, schema, strconv.Itoa(o.drainN), o.drainCap.String())
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("the relay's process: %w", err)
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if ru == nil {
		return fmt.Errorf("no resource usage for the relay's process")
	}
	table([]string{"process", "events/s", "peak RSS MB"}, [][]string{{"relay.New + Run, default Config", string(slices.DeleteFunc(out, func(b byte) bool { return b == '\n' })), fmt.Sprintf("%.1f", float64(ru.Maxrss)/1024)}})
	fmt.Println("\nThe process holds the relay alone (and bun, asynq's client); its backlog was written by the parent.")
	return nil
}

// runChild is the relay's process of runMemory: args are the schema, the number of events and the cap.
func runChild(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "bunbench -child-drain SCHEMA N CAP")
		return 2
	}
	n, _ := strconv.Atoi(args[1])
	limit, _ := time.ParseDuration(args[2])
	ctx := context.Background()
	e, err := newEnv(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.close()
	db := openBun(e.dbURL, map[string]any{"search_path": args[0]}, 20)
	defer db.Close()
	rate, _, err := relayDrain(ctx, db, e.redis, n, limit, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%.0f\n", rate)
	return 0
}
