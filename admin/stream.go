package admin

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/streamsql"
)

// StreamState is the state of the snapshot cursor (relay.EnableStream) of the outbox.
type StreamState struct {
	// On reports whether the stream is on: new rows are streamed rows.
	On bool
	// Cursor reports whether the cursor row exists (the stream was turned on once).
	Cursor bool
	// Waiting counts the streamed rows the cursor has not passed yet (cancelled ones left out): pending
	// rows that a relay's stream round delivers. They are part of Backlog.Pending.
	Waiting int64
	// OldestWaiting is the age of the oldest of them (by its created_at); 0 when none waits.
	OldestWaiting time.Duration
	// WaitsForXID is the oldest transaction whose rows wait (their least xid, as text); "" when none
	// waits.
	WaitsForXID string
	// SinceMoved is how long ago a relay last moved the cursor; 0 without a cursor.
	SinceMoved time.Duration
}

// ReadStream reads the state of the snapshot cursor, through the stream's index: its cost follows the rows
// written since the oldest transaction the cursor waits for, not the table.
func (o *Outbox) ReadStream(ctx context.Context) (StreamState, error) {
	db, names := o.db, o.names
	var st StreamState
	if err := db.NewRaw(names.SQL(streamsql.Enabled)).Scan(ctx, &st.On); err != nil {
		return StreamState{}, fmt.Errorf("admin: read whether the stream is on: %w", err)
	}
	var oldest, moved float64
	var xid sql.NullString
	if err := store.ReadWithoutJIT(ctx, db, func(ctx context.Context, db bun.IDB) error {
		return db.NewRaw(names.SQL(streamsql.Lag)).Scan(ctx, &st.Cursor, &st.Waiting, &oldest, &xid, &moved)
	}); err != nil {
		return StreamState{}, fmt.Errorf("admin: read the stream's cursor: %w", err)
	}
	st.OldestWaiting = time.Duration(max(oldest, 0) * float64(time.Second))
	st.SinceMoved = time.Duration(max(moved, 0) * float64(time.Second))
	st.WaitsForXID = xid.String
	return st, nil
}
