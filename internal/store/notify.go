package store

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/tables"
)

// The notify trigger's statements: after every INSERT into the outbox, a NOTIFY on its channel.

// CreateNotifyTrigger installs, in one transaction, on the outbox table of names a statement-level
// trigger that sends a NOTIFY on channel after every INSERT. It is idempotent.
func CreateNotifyTrigger(ctx context.Context, db bun.IDB, names tables.Names, channel string) error {
	fn := names.Qualify("bunbox_outbox_notify")
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for _, q := range []string{
			`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('` + channel + `', ''); RETURN NULL; END $$`,
			names.SQL(`DROP TRIGGER IF EXISTS bunbox_outbox_notify ON outbox_events`),
			names.SQL(`CREATE TRIGGER bunbox_outbox_notify AFTER INSERT ON outbox_events
FOR EACH STATEMENT EXECUTE FUNCTION `) + fn + `()`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// DropNotifyTrigger removes the trigger of CreateNotifyTrigger from the outbox table of names.
func DropNotifyTrigger(ctx context.Context, db bun.IDB, names tables.Names) error {
	_, err := db.ExecContext(ctx, names.SQL(`DROP TRIGGER IF EXISTS bunbox_outbox_notify ON outbox_events`))
	return err
}
