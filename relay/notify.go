package relay

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// EnableNotifyTrigger installs, on the outbox table that the outbox at loc serves (the zero
// Location is the default outbox), a statement-level trigger that sends a
// NOTIFY after every INSERT, on the channel of that outbox (notifyChannel, with ":" + the schema and the
// prefix when they are set), on which only its relays listen, so an idle relay wakes within milliseconds of
// a commit. It is idempotent. PostgreSQL delivers the notification at commit, and only for a commit. Its
// cost: a NOTIFY takes a database-wide lock at commit, which serializes committing writers that notify;
// see docs/performance.md before enabling it on a hot write path. An invalid schema or prefix gives an
// error wrapping ErrInvalidConfig that names the field.
func EnableNotifyTrigger(ctx context.Context, db bun.IDB, loc model.Location) error {
	if err := validateTables(loc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	names := mustNames(loc)
	return store.CreateNotifyTrigger(ctx, db, names, names.Channel(notifyChannel))
}

// DisableNotifyTrigger removes the trigger of EnableNotifyTrigger from the outbox at loc; its relays fall back to polling.
func DisableNotifyTrigger(ctx context.Context, db bun.IDB, loc model.Location) error {
	if err := validateTables(loc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return store.DropNotifyTrigger(ctx, db, mustNames(loc))
}
