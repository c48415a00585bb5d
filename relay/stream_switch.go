package relay

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// streamLockTimeout bounds how long EnableStream and DisableStream wait for the outbox table's lock: an
// ALTER TABLE queues every writer behind it while it waits, so a long transaction on the table must make
// it fail rather than stall the application.
const streamLockTimeout = "5s"

// EnableStream turns the snapshot cursor on for the outbox at loc. From its commit on, every new row carries the id of the transaction that wrote it and is in
// the stream: relays deliver such rows by reading what committed between two snapshots and moving a
// cursor row (their lane's) past them, with no per-row UPDATE; the rows the stream cannot deliver (an enqueue that
// failed, a row with an ordering key) go to the per-row path. Rows written before stay on the per-row
// path. It is idempotent.
//
// It changes two column defaults of the outbox table (ALTER TABLE), so it needs the role that owns the
// table (the migrations' role) and the table's lock for a moment; it fails after waiting 5 s for the lock,
// naming it. Every relay that serves the outbox must be of a release that knows the stream: an older one
// leaves streamed rows alone (they wait for a relay that streams; none is delivered twice).
func EnableStream(ctx context.Context, db bun.IDB, loc model.Location) error {
	names, err := streamNames(loc)
	if err != nil {
		return err
	}
	return alterOutbox(ctx, db, names, "EnableStream", true, func(ctx context.Context, st *store.Stream, tx bun.Tx) error {
		// The snapshot is taken after the ALTER holds the table: every streamed row is written by a
		// transaction that is still running in it or starts after it, so none is visible in it.
		// A cursor row left by an earlier EnableStream is kept as it is: it still tells which streamed rows
		// were delivered, and every row written from now on is past it.
		// A cursor row of another cluster (a restore) is started anew: see stream_cluster.go.
		if err := st.InsertCursor(ctx, tx); err != nil {
			return err
		}
		return checkCursor(ctx, tx, names, slog.Default())
	})
}

// DisableStream turns the snapshot cursor off for the outbox at loc: new rows are pending rows of the per-row path again, and so are the streamed rows that no
// relay has delivered yet (published_at NULL). The streamed rows already delivered stay as they are; the
// cursor rows keep telling them delivered (bunbox status, cleanup and the reconciler read it). It waits
// for a relay's stream round that is under way, and needs what EnableStream needs. It is idempotent.
func DisableStream(ctx context.Context, db bun.IDB, loc model.Location) error {
	names, err := streamNames(loc)
	if err != nil {
		return err
	}
	return alterOutbox(ctx, db, names, "DisableStream", false, func(ctx context.Context, st *store.Stream, tx bun.Tx) error {
		// Which rows wait is the cursor's word: a cursor of another cluster (a restore) is started anew
		// first, handing over every row it cannot vouch for (stream_cluster.go).
		if err := checkCursor(ctx, tx, names, slog.Default()); err != nil {
			return err
		}
		// A waiting row cancelled meanwhile was never enqueued (the stream settles the cancel as it
		// passes it): its cancel is settled as bunx settles a pending row's.
		return st.HandOverWaiting(ctx, tx, cancelNeverPublished)
	})
}

// StreamEnabled reports whether the snapshot cursor is on for the outbox at loc. It reads only the catalog.
func StreamEnabled(ctx context.Context, db bun.IDB, loc model.Location) (bool, error) {
	names, err := streamNames(loc)
	if err != nil {
		return false, err
	}
	return store.NewStream(names).Enabled(ctx, db)
}

func streamNames(loc model.Location) (tables.Names, error) {
	if err := validateTables(loc); err != nil {
		return tables.Names{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return mustNames(loc), nil
}

// alterOutbox turns the stream on or off (store.Stream.Switch) in a transaction that waits at most
// streamLockTimeout for the table's lock, then runs then in the same transaction. A failed ALTER's error
// names op, the table, the owner role and the lock.
func alterOutbox(ctx context.Context, db bun.IDB, names tables.Names, op string, on bool,
	then func(context.Context, *store.Stream, bun.Tx) error,
) error {
	st := store.NewStream(names)
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := st.Switch(ctx, tx, on, streamLockTimeout, func(err error) error { return streamDDLError(op, names, err) }); err != nil {
			return err
		}
		return then(ctx, st, tx)
	})
}

func streamDDLError(op string, names tables.Names, err error) error {
	return fmt.Errorf("relay: %s: altering %s (it needs the role that owns the table, and its lock within %s; "+
		"a long transaction on the table holds it): %w", op, names.Outbox(), streamLockTimeout, err)
}
