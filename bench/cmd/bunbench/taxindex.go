package main

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// What each of bunbox's indexes costs the writer: the hook's business transaction on a migrated schema
// from which some indexes (or the check constraints) were dropped. A streamed row writes four indexes:
// the primary key, the unique event_id, outbox_events_stream_idx and the lanes' outbox_events_stream_lane_idx;
// it skips the ten partial indexes of the exception queue, cancel, dead rows and delivery options, but
// PostgreSQL still tests each one's predicate. These arms measure; no relay could run on their tables.

// skippedIndexes are the partial indexes a streamed row does not enter.
var skippedIndexes = []string{
	"outbox_events_cancelled_idx", "outbox_events_cancelling_idx", "outbox_events_dead_idx",
	"outbox_events_keyed_inflight_idx", "outbox_events_keyed_open_idx", "outbox_events_pending_idx",
	"outbox_events_process_at_idx", "outbox_events_published_at_idx", "outbox_events_queue_claim_idx",
	"outbox_events_unkeyed_pending_idx",
}

const (
	dropEventIDKey = "ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_event_id_key"
	dropChecks     = `ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_max_retry_check,
  DROP CONSTRAINT outbox_events_retention_ns_check, DROP CONSTRAINT outbox_events_task_group_check,
  DROP CONSTRAINT outbox_events_timeout_ns_check`
)

func dropIndexes(names ...string) []string {
	stmts := make([]string, len(names))
	for i, n := range names {
		stmts[i] = "DROP INDEX " + n
	}
	return stmts
}

func indexTaxArms(ctx context.Context, schema func(bool) (*bun.DB, error)) ([]taxArm, error) {
	skipped := dropIndexes(skippedIndexes...)
	variants := []struct {
		name string
		ddl  []string
	}{
		{"without outbox_events_stream_idx", dropIndexes("outbox_events_stream_idx")},
		{"without the lanes' index", dropIndexes("outbox_events_stream_lane_idx")},
		{"without the unique event_id", []string{dropEventIDKey}},
		{"without the 10 partial indexes a streamed row skips", skipped},
		{"without those and the 4 checks", append(append([]string{}, skipped...), dropChecks)},
		{"without any index but the primary key", append(append([]string{}, skipped...),
			append(dropIndexes("outbox_events_stream_idx", "outbox_events_stream_lane_idx"), dropEventIDKey)...)},
	}
	var arms []taxArm
	for _, v := range variants {
		db, err := schema(true)
		if err != nil {
			return nil, err
		}
		if err := execAll(ctx, db, v.ddl...); err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		arms = append(arms, taxArm{"bunbox hook " + v.name, "bunx.OnInsert on the models, on bunbox's table " + v.name, hookTx(db)})
	}
	return arms, nil
}
