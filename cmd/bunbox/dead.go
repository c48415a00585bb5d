package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/admin"
	"github.com/bunbox/bunbox/internal/badrow"
	"github.com/bunbox/bunbox/internal/wire"
)

func (c *cli) dead(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError(c.stderr, "dead needs list, retry or purge")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "list":
		return c.deadList(ctx, args)
	case "retry":
		return c.deadRetry(ctx, args)
	case "purge":
		return c.deadPurge(ctx, args)
	default:
		return usageError(c.stderr, "unknown dead command %q (want list, retry or purge)", sub)
	}
}

// deadEventJSON is one dead event in `dead list -json`.
type deadEventJSON struct {
	EventID   string     `json:"event_id"`
	Name      string     `json:"name"`
	Queue     string     `json:"queue"`
	Attempts  int        `json:"attempts"`
	CreatedAt time.Time  `json:"created_at"`
	DeadAt    *time.Time `json:"dead_at"`
	LastError string     `json:"last_error"`
	// Payload describes an encoded payload (bunx.WithLocation's Codec), "encrypted (key id k1), 310 bytes", never its
	// bytes; absent for a JSON payload.
	Payload string `json:"payload,omitempty"`
	// BadRow says what is wrong with a row written around bunx (metadata that is not a JSON object of
	// strings, a time that is not finite), quoting the column; absent for a good row.
	BadRow string `json:"bad_row,omitempty"`
}

func (c *cli) deadList(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bunbox dead list", flag.ContinueOnError)
	limit := fs.Int("limit", 100, "how many dead events to list")
	asJSON := fs.Bool("json", false, "print JSON")
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("dead list", rest); err != nil {
		return err
	}
	if *limit < 1 {
		return usageError(c.stderr, "-limit must be positive")
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	ob, err := c.admin(db)
	if err != nil {
		return err
	}
	events, err := ob.ListDead(ctx, *limit)
	if err != nil {
		return fmt.Errorf("list dead events: %w", err)
	}
	if *asJSON {
		out := make([]deadEventJSON, len(events))
		for i, ev := range events {
			out[i] = deadEventJSON{EventID: ev.EventID.String(), Name: ev.Name, Queue: ev.Queue, Attempts: ev.Attempts,
				CreatedAt: ev.CreatedAt.UTC(), LastError: ev.LastError, Payload: wire.DescribeEncoded(ev.Metadata, ev.PayloadEncoded, ev.Payload),
				BadRow: badrow.Problem(ev.Metadata)}
			if ev.DeadAt != nil {
				at := ev.DeadAt.UTC()
				out[i].DeadAt = &at
			}
		}
		return c.printJSON(out)
	}
	if len(events) == 0 {
		fmt.Fprintln(c.stdout, "no dead events")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT ID\tNAME\tQUEUE\tATTEMPTS\tDEAD AT\tLAST ERROR")
	var bad []string
	for _, ev := range events {
		deadAt := "-"
		if ev.DeadAt != nil {
			deadAt = ev.DeadAt.UTC().Format(time.RFC3339)
		}
		id := ev.EventID.String()
		if p := badrow.Problem(ev.Metadata); p != "" {
			id += " (bad row)"
			bad = append(bad, fmt.Sprintf("  %s: %s", ev.EventID, oneLine(p, 300)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", id, ev.Name, ev.Queue, ev.Attempts, deadAt, oneLine(ev.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(bad) > 0 {
		fmt.Fprintf(c.stdout, "\n%s written around bunx (fix the row with SQL, or purge it):\n%s\n",
			plural(int64(len(bad)), "bad row", "bad rows"), strings.Join(bad, "\n"))
	}
	return nil
}

// deadRetry puts dead events back in line: the ones named by id, or all of some event names, or all.
func (c *cli) deadRetry(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bunbox dead retry", flag.ContinueOnError)
	var names namesFlag
	fs.Var(&names, "name", "retry every dead event of this name (repeatable)")
	all := fs.Bool("all", false, "retry every dead event")
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	var f admin.DeadFilter
	switch {
	case *all && (len(names) > 0 || len(rest) > 0), len(names) > 0 && len(rest) > 0:
		return usageError(c.stderr, "dead retry takes event ids, -name or -all, one of them")
	case *all:
		f.All = true
	case len(names) > 0:
		f.Names = names
	default:
		if f.EventIDs, err = parseEventIDs(rest); err != nil {
			return usageError(c.stderr, "%v (or -name NAME, or -all)", err)
		}
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	ob, err := c.admin(db)
	if err != nil {
		return err
	}
	var where map[uuid.UUID]eventWhere
	if len(f.EventIDs) > 0 {
		if where, err = c.whereAre(ctx, db, f.EventIDs); err != nil {
			return err
		}
	}
	n, err := ob.RetryDeadWhere(ctx, f)
	if err != nil {
		return fmt.Errorf("retry dead events: %w", err)
	}
	if len(f.EventIDs) == 0 {
		fmt.Fprintf(c.stdout, "%s put back in line\n", plural(n, "dead event", "dead events"))
		return nil
	}
	fmt.Fprintf(c.stdout, "%d of %s put back in line\n", n, plural(int64(len(f.EventIDs)), "event", "events"))
	if n == int64(len(f.EventIDs)) {
		return nil
	}
	// Say where each one that was not put back is, and fail: the operator asked for these ids.
	var notDead int
	for _, id := range f.EventIDs {
		w, ok := where[id]
		switch {
		case !ok:
			fmt.Fprintf(c.stderr, "bunbox: %s: not in the outbox (unknown, or published and deleted after the retention)\n", id)
		case w.dead && !w.cancelled:
			continue // put back now, or by someone else meanwhile
		default:
			fmt.Fprintf(c.stderr, "bunbox: %s: not dead: %s\n", id, w.describe())
		}
		notDead++
	}
	return fmt.Errorf("dead retry: %d of %d events not put back: they are not dead (see above)", notDead, len(f.EventIDs))
}

// deadPurge deletes dead events for good: those dead for longer than -older-than and/or of the names
// given, or all; it counts them and asks for -yes first.
func (c *cli) deadPurge(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bunbox dead purge", flag.ContinueOnError)
	var names namesFlag
	fs.Var(&names, "name", "purge the dead events of this name (repeatable)")
	olderThan := fs.Duration("older-than", 0, "purge the events dead for longer than this, e.g. 720h")
	all := fs.Bool("all", false, "purge every dead event")
	yes := fs.Bool("yes", false, "confirm: delete them for good")
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("dead purge", rest); err != nil {
		return err
	}
	f := admin.DeadFilter{Names: names, OlderThan: *olderThan, All: *all}
	switch {
	case *olderThan < 0:
		return usageError(c.stderr, "-older-than must be positive, got %s", *olderThan)
	case *all && (len(names) > 0 || *olderThan > 0):
		return usageError(c.stderr, "dead purge takes -all alone, or -older-than and/or -name")
	case !*all && len(names) == 0 && *olderThan == 0:
		return usageError(c.stderr, "dead purge needs -older-than DURATION, -name NAME or -all")
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	ob, err := c.admin(db)
	if err != nil {
		return err
	}
	if !*yes {
		n, err := ob.CountDead(ctx, f)
		if err != nil {
			return fmt.Errorf("count dead events: %w", err)
		}
		return usageError(c.stderr, "dead purge would delete %s for good: add -yes to confirm", plural(n, "dead event", "dead events"))
	}
	n, err := ob.PurgeDead(ctx, f)
	if err != nil {
		if errors.Is(err, admin.ErrEmptyDeadFilter) {
			return usageError(c.stderr, "%v", err)
		}
		return fmt.Errorf("purge dead events: %w", err)
	}
	fmt.Fprintf(c.stdout, "%s deleted\n", plural(n, "dead event", "dead events"))
	return nil
}
