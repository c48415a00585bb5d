package admin

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/internal/badrow"
)

// blockedKeysLimitDefault is how many blocked keys BlockedKeys lists when limit is not positive.
const blockedKeysLimitDefault = 100

// BlockedKey is an ordering key (model.WithOrderingKey) whose next event is dead: no later event of the
// key is handed to asynq until the dead one is retried (RetryDead, `bunbox dead retry`).
type BlockedKey struct {
	// Key is the ordering key.
	Key string
	// EventID, EventName and Queue name the dead event at the head of the key.
	EventID   uuid.UUID
	EventName string
	Queue     string
	// DeadAt is when it was marked dead, LastError why: the relay's last enqueue error, or asynq's last
	// error when asynq archived its task.
	DeadAt    time.Time
	LastError string
	// Waiting counts the events of the key held back behind it.
	Waiting int64
}

// BlockedKeys lists up to limit blocked keys, the longest blocked first. A limit <= 0 means
// 100. It reads the dead rows (their partial index) and, per key, the key's
// unfinished rows.
func (o *Outbox) BlockedKeys(ctx context.Context, limit int) ([]BlockedKey, error) {
	if limit <= 0 {
		limit = blockedKeysLimitDefault
	}
	db, names := o.db, o.names
	var keys []BlockedKey
	rows, err := db.QueryContext(ctx, names.SQL(`SELECT d.ordering_key, d.event_id, d.event_name, d.queue, `+badrow.TimeExpr("d", "dead_at")+`, coalesce(d.last_error, ''),
  (SELECT count(*) FROM outbox_events w WHERE w.ordering_key = d.ordering_key AND w.completed_at IS NULL AND w.id > d.id)
FROM outbox_events d
WHERE d.dead_at IS NOT NULL AND d.ordering_key IS NOT NULL AND d.completed_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM outbox_events p
                  WHERE p.ordering_key = d.ordering_key AND p.completed_at IS NULL AND p.id < d.id)
ORDER BY d.dead_at, d.id
LIMIT ?`), limit)
	if err != nil {
		return nil, fmt.Errorf("admin: list blocked keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k BlockedKey
		var deadAt sql.NullTime // NULL for a dead_at that is not finite (raw SQL): the key is still listed
		if err := rows.Scan(&k.Key, &k.EventID, &k.EventName, &k.Queue, &deadAt, &k.LastError, &k.Waiting); err != nil {
			return nil, fmt.Errorf("admin: list blocked keys: %w", err)
		}
		k.DeadAt = deadAt.Time
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: list blocked keys: %w", err)
	}
	return keys, nil
}
