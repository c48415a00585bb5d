package shop

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// schemaSQL is the shop's own schema. A real service would keep it in bun/migrate migrations next to
// bunbox's (bunboxmigrate.Register); the example keeps it to one idempotent script.
const schemaSQL = `
CREATE TABLE IF NOT EXISTS orders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer    text        NOT NULL,
    total_cents bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS order_lines (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id    bigint NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    sku         text   NOT NULL,
    quantity    integer NOT NULL,
    price_cents bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS order_lines_order_id_idx ON order_lines (order_id);
-- One row per order that got a confirmation; deliveries counts how often the handler ran for it, so a
-- repeated delivery shows up as deliveries > 1.
CREATE TABLE IF NOT EXISTS confirmations (
    order_id   bigint      PRIMARY KEY,
    event_id   uuid        NOT NULL,
    customer   text        NOT NULL,
    deliveries integer     NOT NULL DEFAULT 1,
    handled_at timestamptz NOT NULL
);
`

// Migrate applies bunbox's schema (outbox_events) with bunboxmigrate.Up, then the shop's tables. It is
// idempotent, and safe to run from several processes at once.
func Migrate(ctx context.Context, db *bun.DB) error {
	if err := bunboxmigrate.Up(ctx, db); err != nil {
		return fmt.Errorf("bunbox schema: %w", err)
	}
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// The same advisory lock serialises concurrent Migrate calls (CREATE ... IF NOT EXISTS can still
		// race on the catalog otherwise).
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('bunbox_example_shop'))"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, schemaSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("shop schema: %w", err)
	}
	return nil
}
