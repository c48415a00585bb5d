package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/bunbox/bunbox/relay"
)

// stream runs `bunbox stream on|off|status`: it turns the snapshot cursor on or off (relay.EnableStream,
// relay.DisableStream) for the outbox of -schema/-table-prefix, or shows its state.
func (c *cli) stream(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError(c.stderr, "stream needs on, off or status")
	}
	sub, args := args[0], args[1:]
	if sub != "on" && sub != "off" && sub != "status" {
		return usageError(c.stderr, "unknown stream command %q (want on, off or status)", sub)
	}
	fs := flag.NewFlagSet("bunbox stream "+sub, flag.ContinueOnError)
	var asJSON *bool
	if sub == "status" {
		asJSON = fs.Bool("json", false, "print JSON")
	}
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("stream "+sub, rest); err != nil {
		return err
	}
	db, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	loc := c.loc
	outbox := c.names().Outbox()
	switch sub {
	case "on":
		if err := relay.EnableStream(ctx, db, loc); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "stream on for %s: new events are delivered by the snapshot cursor "+
			"(every relay serving it must be of a release that streams; rows written before stay on the per-row path)\n", outbox)
		return nil
	case "off":
		if err := relay.DisableStream(ctx, db, loc); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "stream off for %s: new events, and the streamed ones not yet delivered, are on the per-row path\n", outbox)
		return nil
	}
	ob, err := c.admin(db)
	if err != nil {
		return err
	}
	st, err := ob.ReadStream(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return c.printJSON(newStreamStatus(st))
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	printStreamStatus(tw, st)
	return tw.Flush()
}
