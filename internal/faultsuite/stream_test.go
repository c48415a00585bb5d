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

// streamOn is FAULT_STREAM=1: the suite runs with the snapshot cursor on (relay.EnableStream), so every
// event the producer records is a streamed row, delivered by the relays' stream rounds, and the rows the
// stream hands over (ordering keys, failed enqueues) by their per-row rounds.
var streamOn = os.Getenv("FAULT_STREAM") == "1"

// pendingFrom and pendingWhere count the rows still to be delivered, whether the stream is on or not: a
// pending row of the per-row path, or a streamed row the cursor has not passed. With the stream off no
// row is streamed and they count exactly the pending rows.
const (
	pendingFrom  = `outbox_events e ` + streamsql.Cursor
	pendingWhere = `(e.published_at IS NULL AND e.dead_at IS NULL) OR ` + streamsql.Waiting
)

// enableStream turns the stream on for db's outbox when FAULT_STREAM=1.
func enableStream(t *testing.T, db *bun.DB) {
	t.Helper()
	if !streamOn {
		return
	}
	if err := relay.EnableStream(context.Background(), db, model.Location{}); err != nil {
		t.Fatalf("enable stream: %v", err)
	}
	t.Log("FAULT_STREAM=1: the snapshot cursor is on")
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
