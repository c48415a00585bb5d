package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/admin"
	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

func (c *cli) migrate(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError(c.stderr, "migrate needs up, down or status")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("bunbox migrate "+sub, flag.ContinueOnError)
	yes, asJSON := false, false
	if sub == "down" {
		fs.BoolVar(&yes, "yes", false, "confirm: drop outbox_events and every event in it")
	}
	if sub == "status" {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	}
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("migrate "+sub, rest); err != nil {
		return err
	}
	switch sub {
	case "up", "down", "status":
	default:
		return usageError(c.stderr, "unknown migrate command %q (want up, down or status)", sub)
	}
	if sub == "down" && !yes {
		return usageError(c.stderr, "migrate down drops outbox_events and every event in it: add -yes to confirm")
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	switch sub {
	case "up":
		if err := bunboxmigrate.Up(ctx, db, c.migrateOptions()...); err != nil {
			return fmt.Errorf("migrate up: %w", err)
		}
		fmt.Fprintln(c.stdout, "bunbox schema is up to date")
	case "down":
		if err := bunboxmigrate.Down(ctx, db, c.migrateOptions()...); err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
		fmt.Fprintln(c.stdout, "bunbox schema rolled back")
	case "status":
		ms, err := bunboxmigrate.Status(ctx, db, c.migrateOptions()...)
		if err != nil {
			return fmt.Errorf("migrate status: %w", err)
		}
		if asJSON {
			return c.printJSON(migrationsJSON(ms))
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MIGRATION\tAPPLIED")
		for _, m := range ms {
			applied := "no"
			if m.IsApplied() {
				applied = m.MigratedAt.UTC().Format(time.RFC3339)
			}
			name := m.Name
			if m.Comment != "" {
				name = m.String()
			}
			fmt.Fprintf(tw, "%s\t%s\n", name, applied)
		}
		return tw.Flush()
	}
	return nil
}

// statusReport is what `bunbox status` prints.
type statusReport struct {
	Pending          int64   `json:"pending"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	Published        int64   `json:"published"`
	Dead             int64   `json:"dead"`
	Scheduled        int64   `json:"scheduled"`
	// Stream is the snapshot cursor's state (relay.EnableStream): its waiting rows are part of Pending.
	Stream streamStatus `json:"stream"`
	// Events breaks Pending and Dead down by queue and event name.
	Events []eventStatus `json:"events"`
	// BlockedKeys counts the ordering keys held by a dead event; Blocked lists the first of them.
	BlockedKeys int64              `json:"blocked_keys"`
	Blocked     []admin.BlockedKey `json:"blocked,omitempty"`
	// Queues is what asynq holds in each of its queues (handlers retrying or archived included), read from
	// Redis; QueuesError says why it could not be read.
	Queues      []queueStatus `json:"queues"`
	QueuesError string        `json:"queues_error,omitempty"`
}

func (c *cli) status(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bunbox status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	withAsynq := fs.Bool("asynq", true, "also read asynq's queues from Redis: pending, active, scheduled, retry, archived, completed tasks (-asynq=false: PostgreSQL only)")
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("status", rest); err != nil {
		return err
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	// One snapshot for every count (REPEATABLE READ): pending includes the stream's waiting rows, so it is
	// never below them, and the per-event table adds up to the totals, under traffic too.
	var rep statusReport
	var b admin.Backlog
	var st admin.StreamState
	err = db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, func(ctx context.Context, tx bun.Tx) error {
		ob, err := c.admin(tx) // every read in this one snapshot
		if err != nil {
			return err
		}
		if b, err = ob.ReadBacklog(ctx); err != nil {
			return fmt.Errorf("read backlog: %w", err)
		}
		var published int64
		if err := tx.NewRaw(c.names().SQL(publishedCountSQL)).Scan(ctx, &published); err != nil {
			return fmt.Errorf("count published: %w", err)
		}
		if st, err = ob.ReadStream(ctx); err != nil {
			return fmt.Errorf("read the stream: %w", err)
		}
		rep = statusReport{Pending: b.Pending, OldestPendingAge: b.Lag.Seconds(), Published: published, Dead: b.Dead, Scheduled: b.Scheduled,
			BlockedKeys: b.BlockedKeys, Stream: newStreamStatus(st)}
		if rep.Events, err = readEventStatus(ctx, ob); err != nil {
			return err
		}
		if b.BlockedKeys > 0 {
			if rep.Blocked, err = ob.BlockedKeys(ctx, statusBlockedKeys); err != nil {
				return fmt.Errorf("list blocked keys: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var queuesErr error
	if *withAsynq {
		queuesErr = c.readQueues(ctx, &rep)
	}
	if *asJSON {
		return errors.Join(c.printJSON(rep), queuesErr)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "pending\t%d\n", rep.Pending)
	fmt.Fprintf(tw, "oldest pending\t%s\n", formatAge(b.Lag))
	fmt.Fprintf(tw, "published\t%d\n", rep.Published)
	fmt.Fprintf(tw, "dead\t%d\n", rep.Dead)
	fmt.Fprintf(tw, "scheduled\t%d\n", rep.Scheduled)
	fmt.Fprintf(tw, "blocked keys\t%d\n", rep.BlockedKeys)
	printStreamStatus(tw, st)
	for _, k := range rep.Blocked {
		fmt.Fprintf(tw, "  key %s\theld by dead event %s (%d waiting behind it): `bunbox dead retry %s`\n",
			oneLine(k.Key, 60), k.EventID, k.Waiting, k.EventID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := c.printEventStatus(rep.Events); err != nil {
		return err
	}
	switch {
	case !*withAsynq:
		return nil
	case queuesErr != nil:
		fmt.Fprintln(c.stdout, "\nasynq's queues: unreadable (see the error)")
		return queuesErr
	}
	return c.printQueues(rep.Queues)
}

// statusBlockedKeys is how many blocked keys `bunbox status` lists.
const statusBlockedKeys = 10

func formatAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// parseEventIDs parses the event ids of `dead retry`: at least one, each a UUID.
func parseEventIDs(args []string) ([]uuid.UUID, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("dead retry needs at least one event id")
	}
	ids := make([]uuid.UUID, 0, len(args))
	for _, a := range args {
		id, err := uuid.Parse(a)
		if err != nil {
			return nil, fmt.Errorf("%q is not an event id (a UUID)", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// oneLine shortens s to one line of at most n runes, for a table cell.
func oneLine(s string, n int) string {
	out := make([]rune, 0, n)
	for _, r := range s {
		if r == '\n' || r == '\r' || r == '\t' {
			r = ' '
		}
		if len(out) == n {
			out[n-1] = '…'
			break
		}
		out = append(out, r)
	}
	return string(out)
}
