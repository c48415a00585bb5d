package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/internal/tables"
)

// cancelledJSON is one event in `cancel -json`.
type cancelledJSON struct {
	EventID   string `json:"event_id"`
	Name      string `json:"name"`
	Queue     string `json:"queue"`
	Published bool   `json:"published"`
	Settled   bool   `json:"settled"`
	Result    string `json:"result"`
}

// cancel cancels events by id in one transaction (bunx.Outbox.Cancel) and reports each one's state;
// with -wait it waits, up to that long, for the relay to settle the published ones.
func (c *cli) cancel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bunbox cancel", flag.ContinueOnError)
	wait := fs.Duration("wait", 0, "wait up to this long for the relay to take the published events' tasks out of asynq")
	asJSON := fs.Bool("json", false, "print JSON")
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if *wait < 0 {
		return usageError(c.stderr, "-wait must not be negative")
	}
	if len(rest) == 0 {
		return usageError(c.stderr, "cancel needs at least one event id")
	}
	ids, err := parseEventIDs(rest)
	if err != nil {
		return usageError(c.stderr, "%v", err)
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	ob := bunx.New(db, bunx.WithLocation(c.loc))
	if err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return ob.Cancel(ctx, tx, ids...)
	}); err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	states, err := readCancelled(ctx, db, c.names(), ids)
	deadline := time.Now().Add(*wait)
	for err == nil && !allSettled(states) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		states, err = readCancelled(ctx, db, c.names(), ids)
	}
	if err != nil {
		return fmt.Errorf("read the cancelled events: %w", err)
	}
	if *asJSON {
		return c.printJSON(states)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT ID\tNAME\tQUEUE\tCANCEL")
	for _, s := range states {
		result := s.Result
		switch {
		case !s.Settled && s.Result == "" && s.Published:
			result = "published: the relay takes its task out of asynq (see the relay's log)"
		case !s.Settled && s.Result == "":
			result = "waiting in the stream: the relay settles it (see the relay's log)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.EventID, s.Name, s.Queue, result)
	}
	return tw.Flush()
}

// readCancelled reads the cancel state of the events, in the order of ids.
func readCancelled(ctx context.Context, db bun.IDB, names tables.Names, ids []uuid.UUID) ([]cancelledJSON, error) {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	var rows []struct {
		EventID   uuid.UUID `bun:"event_id"`
		Name      string    `bun:"event_name"`
		Queue     string    `bun:"queue"`
		Published bool      `bun:"published"`
		Settled   bool      `bun:"settled"`
		Result    string    `bun:"result"`
	}
	// A streamed row (relay.EnableStream) is published once the cursor has delivered it.
	if err := db.NewRaw(names.SQL(`SELECT e.event_id, e.event_name, e.queue,
  e.published_at IS NOT NULL AND (e.published_at <> 'infinity' OR `+streamsql.Delivered+`) AS published,
  e.cancel_settled_at IS NOT NULL AS settled, coalesce(e.cancel_result, '') AS result
FROM outbox_events e `+streamsql.Cursor+` WHERE e.event_id = ANY(?::uuid[])`), pgdialect.Array(s)).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	by := map[uuid.UUID]cancelledJSON{}
	for _, r := range rows {
		by[r.EventID] = cancelledJSON{EventID: r.EventID.String(), Name: r.Name, Queue: r.Queue, Published: r.Published,
			Settled: r.Settled, Result: r.Result}
	}
	out := make([]cancelledJSON, 0, len(ids))
	seen := map[uuid.UUID]bool{}
	for _, id := range ids {
		st, ok := by[id]
		if seen[id] {
			continue
		}
		seen[id] = true
		if !ok {
			return nil, errors.New("event " + id.String() + " vanished after its cancel (deleted after its retention?)")
		}
		out = append(out, st)
	}
	return out, nil
}

func allSettled(states []cancelledJSON) bool {
	for _, s := range states {
		if !s.Settled {
			return false
		}
	}
	return true
}
