package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/internal/badrow"
	"github.com/bunbox/bunbox/internal/streamsql"
)

// eventWhereSQL reads, for each event id given, where its row is: dead, cancelled, in the stream,
// published or pending, with the times that go with it (NULL when not finite: rows written around bunx).
var eventWhereSQL = `SELECT e.event_id, e.dead_at IS NOT NULL, e.cancelled_at IS NOT NULL, ` + badrow.TimeExpr("e", "cancelled_at") + `,
  coalesce(e.published_at = 'infinity', false), coalesce(` + streamsql.Waiting + `, false),
  (CASE WHEN isfinite(` + streamsql.PublishedAt + `) THEN ` + streamsql.PublishedAt + ` END),
  e.attempts, ` + badrow.TimeExpr("e", "next_attempt_at") + `
FROM outbox_events e ` + streamsql.Cursor + `
WHERE e.event_id = ANY(?::uuid[])`

// eventWhere is where `dead retry` found an event.
type eventWhere struct {
	dead, cancelled, streamed, waiting bool
	cancelledAt, publishedAt, next     sql.NullTime
	attempts                           int
}

// describe says where the event is, for an operator who asked to retry it.
func (w eventWhere) describe() string {
	at := func(t sql.NullTime) string {
		if !t.Valid {
			return "an unknown time"
		}
		return t.Time.UTC().Format(time.RFC3339)
	}
	switch {
	case w.dead:
		return "dead"
	case w.cancelled:
		return "cancelled at " + at(w.cancelledAt) + " (bunx.Outbox.Cancel): it is never delivered"
	case w.streamed && w.waiting:
		return "pending: it waits in the stream for a relay's stream round"
	case w.streamed:
		return "published by the stream at or before " + at(w.publishedAt) + ": its task is asynq's (`bunbox tasks list`)"
	case w.publishedAt.Valid:
		return "published at " + at(w.publishedAt) + ": its task is asynq's (`bunbox tasks list`)"
	case w.next.Valid:
		return fmt.Sprintf("pending: the relay retries it at %s (%d failed attempts)", at(w.next), w.attempts)
	default:
		return "pending: the relay delivers it next round"
	}
}

// whereAre looks the events up in the outbox; an id missing from the result is not in the table.
func (c *cli) whereAre(ctx context.Context, db bun.IDB, ids []uuid.UUID) (map[uuid.UUID]eventWhere, error) {
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = id.String()
	}
	q := c.names().SQL(eventWhereSQL)
	rows, err := db.QueryContext(ctx, q, pgdialect.Array(strs))
	if err != nil {
		return nil, fmt.Errorf("look the events up: %w", err)
	}
	defer rows.Close()
	out := make(map[uuid.UUID]eventWhere, len(ids))
	for rows.Next() {
		var id uuid.UUID
		var w eventWhere
		if err := rows.Scan(&id, &w.dead, &w.cancelled, &w.cancelledAt, &w.streamed, &w.waiting, &w.publishedAt, &w.attempts, &w.next); err != nil {
			return nil, fmt.Errorf("look the events up: %w", err)
		}
		out[id] = w
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look the events up: %w", err)
	}
	return out, nil
}
