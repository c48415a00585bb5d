//go:build fault

package faultsuite

import (
	"context"
	"os"
	"testing"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/streamsql"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
)

// streamOn is true unless FAULT_STREAM=0: the suite runs with the snapshot stream on, as the migrations
// leave an outbox, so every event the producer records is a streamed row, delivered by the relays'
// stream rounds, and the rows the stream hands over (ordering keys, failed enqueues) by their per-row
// rounds. FAULT_STREAM=0 turns the stream off (relay.DisableStream): the per-row path alone.
var streamOn = os.Getenv("FAULT_STREAM") != "0"

// pendingFrom and pendingWhere count the rows still to be delivered, whether the stream is on or not: a
// pending row of the per-row path, or a streamed row the cursor has not passed. With the stream off no
// row is streamed and they count exactly the pending rows.
const (
	pendingFrom  = `outbox_events e ` + streamsql.Cursor
	pendingWhere = `(e.published_at IS NULL AND e.dead_at IS NULL) OR ` + streamsql.Waiting
)

// setStream turns the stream off for db's outbox when FAULT_STREAM=0, and checks that it is on
// otherwise.
func setStream(t *testing.T, db *bun.DB) {
	t.Helper()
	ctx := context.Background()
	if !streamOn {
		if err := relay.DisableStream(ctx, db, model.Location{}); err != nil {
			t.Fatalf("disable stream: %v", err)
		}
		t.Log("FAULT_STREAM=0: the stream is off, the per-row path alone")
		return
	}
	on, err := relay.StreamEnabled(ctx, db, model.Location{})
	if err != nil || !on {
		t.Fatalf("the stream is not on after the migrations (%v)", err)
	}
	t.Log("the snapshot stream is on")
}

// pendingCount counts the rows still to be delivered (pendingWhere) that also meet cond, an SQL condition
// on outbox_events aliased e.
func pendingCount(t *testing.T, db *bun.DB, cond string) int {
	t.Helper()
	var n int
	if err := db.NewRaw("SELECT count(*) FROM "+pendingFrom+" WHERE ("+cond+") AND ("+pendingWhere+")").
		Scan(context.Background(), &n); err != nil {
		t.Fatalf("count pending rows: %v", err)
	}
	return n
}
