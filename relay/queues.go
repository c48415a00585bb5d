package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/bunbox/bunbox/model"
)

// maxQueueWeight is the largest weight of Config.Queues.
const maxQueueWeight = 1_000_000

// queueClaimFrom is the claim of a share of Config.Queues after its columns: the pending rows of the
// share's queues (one named queue, or the rest) after a cursor id, in id order. Each queue is read on
// outbox_events_queue_claim_idx (queue, id) on its own, so a backlog in one queue costs nothing to the
// claim of another, and the rest's queues are merged in id order (first come, first served, as without
// Queues). Of the rows each queue locks, those past the LIMIT are released when the round ends.
// Arguments: the queues (a text array), the cursor, the limit twice.
//
// `(queue, id) > (q.name, cursor) AND queue <= q.name` is `queue = q.name AND id > cursor` written so
// that only the (queue, id) index can serve it in (queue, id) order: with the equality, PostgreSQL
// estimated each queue of the lateral claim at the rows of the queue its statistics knew (the backlog),
// read outbox_events_unkeyed_pending_idx instead and filtered the whole backlog to find the one row of a
// quiet queue, 50–130 ms of every round behind 100,000 bulk rows (TestQueuesClaimReadsTheQueueIndex).
const queueClaimFrom = `
FROM unnest(?::text[]) AS q(name) CROSS JOIN LATERAL (
  SELECT ` + claimColumns + `, ` + rowSizeSQL + ` AS row_size
  FROM outbox_events
  WHERE (queue, id) > (q.name, ?) AND queue <= q.name
    AND published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL
    AND (next_attempt_at IS NULL OR next_attempt_at <= now())
  ORDER BY queue, id
  LIMIT ?
  FOR UPDATE SKIP LOCKED) c
ORDER BY id
LIMIT ?`

// The claim of a share, with the row sizes and under the byte budget's window (see budgeted).
var (
	queueClaimSizedSQL  = `SELECT c.*` + queueClaimFrom
	queueClaimBudgetSQL = budgeted(queueClaimSizedSQL)
)

// restQueuesSQL lists the queues with pending unkeyed rows that Config.Queues does not name (its one
// argument, a text array): a skip scan of outbox_events_queue_claim_idx, one index descent per queue
// with pending rows, however many rows they hold.
const restQueuesSQL = `WITH RECURSIVE qs AS (
  (SELECT queue FROM outbox_events
   WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key IS NULL AND cancelled_at IS NULL
   ORDER BY queue LIMIT 1)
  UNION ALL
  SELECT n.queue FROM qs, LATERAL (
    SELECT e.queue FROM outbox_events e
    WHERE e.queue > qs.queue
      AND e.published_at IS NULL AND e.dead_at IS NULL AND e.ordering_key IS NULL AND e.cancelled_at IS NULL
    ORDER BY e.queue LIMIT 1) n
)
SELECT queue FROM qs WHERE NOT (queue = ANY(?::text[]))`

// queueShare is one share of a round's unkeyed rows: a queue named in Config.Queues, or the rest (the
// queues not named, claimed together in id order, with weight 1).
type queueShare struct {
	queues []string
	weight int
}

// fairQueues is Config.Queues as the claim uses it.
type fairQueues struct {
	named  []queueShare // by weight, highest first, then by name
	names  []string     // the named queues
	strict bool         // Config.StrictPriority
	rounds atomic.Uint64

	lane laneState // what the workers' claims found, for the lane (queues_lane.go)
}

// newFairQueues returns the claim's view of cfg.Queues, nil when it names none.
func newFairQueues(cfg Config) *fairQueues {
	if len(cfg.Queues) == 0 {
		return nil
	}
	fq := &fairQueues{strict: cfg.StrictPriority, lane: laneState{backlog: map[string]bool{}, kick: make(chan struct{}, 1)}}
	for name, w := range cfg.Queues {
		fq.named = append(fq.named, queueShare{queues: []string{name}, weight: w})
		fq.names = append(fq.names, name)
	}
	slices.SortFunc(fq.named, func(a, b queueShare) int {
		return cmp.Or(cmp.Compare(b.weight, a.weight), strings.Compare(a.queues[0], b.queues[0]))
	})
	return fq
}

// validateQueues checks Config.Queues.
func validateQueues(queues map[string]int) error {
	var errs []error
	for name, w := range queues {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, errors.New("Queues must not name an empty queue"))
			continue
		}
		if w < 1 || w > maxQueueWeight {
			errs = append(errs, fmt.Errorf("Queues[%q] must be a weight between 1 and %d, got %d", name, maxQueueWeight, w))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// plan splits n rows between the shares: the order in which they are claimed and each one's limit.
// With StrictPriority every share may take all that is left, highest weight first. Otherwise each takes
// its part by weight, at least one row; when n is too small to give each share a row, the share that
// goes first turns from round to round in proportion to the weights.
func (fq *fairQueues) plan(n int, shares []queueShare) (order, limits []int) {
	order = make([]int, len(shares))
	limits = make([]int, len(shares))
	var total int64
	for _, s := range shares {
		total += int64(s.weight)
	}
	first := 0
	if !fq.strict && n < len(shares) {
		turn := int64(fq.rounds.Add(1) % uint64(total))
		for i, s := range shares {
			if turn < int64(s.weight) {
				first = i
				break
			}
			turn -= int64(s.weight)
		}
	}
	for k := range shares {
		i := (first + k) % len(shares)
		order[k] = i
		if fq.strict {
			limits[i] = n
		} else {
			limits[i] = int(max(1, int64(n)*int64(shares[i].weight)/total))
		}
	}
	return order, limits
}

// claimUnkeyed appends to events up to n unkeyed rows within budget bytes. Without Config.Queues it is
// the FIFO claim (claimQuery). With it, the rows are claimed share by share (see plan), each share on its
// own queues' index, so that a backlog in one queue does not delay another; a share that had fewer rows
// than its part leaves the rest of it to the shares that filled theirs, in the same order. Each claim
// takes at least one row even past the budget (see budgeted): with Queues, a round can go over by one
// row per share it claims from.
func (r *Relay) claimUnkeyed(ctx context.Context, tx bun.Tx, events []model.Event, bad map[int]error, n int,
	budget int64, windowed bool,
) ([]model.Event, map[int]error, error) {
	fq := r.queues
	if fq == nil {
		return claimBy(ctx, tx, events, bad, r.names.SQL(claimQuery(false, windowed)), windowed, budget, n)
	}
	shares := fq.named
	var rest []string
	if err := tx.NewRaw(r.names.SQL(restQueuesSQL), pgdialect.Array(fq.names)).Scan(ctx, &rest); err != nil {
		return nil, nil, fmt.Errorf("list the queues not named in Queues: %w", err)
	}
	if len(rest) > 0 {
		shares = append(slices.Clip(shares), queueShare{queues: rest, weight: 1})
	}
	order, limits := fq.plan(n, shares)
	query := queueClaimSizedSQL
	if windowed {
		query = queueClaimBudgetSQL
	}
	after := make([]int64, len(shares))
	full := make([]bool, len(shares))
	reached := make([]bool, len(shares))
	leftRows, leftBytes := n, budget
	var err error
	defer func() {
		if err == nil {
			fq.lane.note(fq, shares, reached, full)
		}
	}()
	claimShare := func(i, limit int) bool {
		before := len(events)
		events, bad, err = claimBy(ctx, tx, events, bad, r.names.SQL(query), windowed, leftBytes,
			pgdialect.Array(shares[i].queues), after[i], limit, limit)
		if err != nil {
			return false
		}
		got := events[before:]
		gotBytes := claimedBytes(got)
		if len(got) > 0 {
			after[i] = got[len(got)-1].ID
		}
		// Full: it had as many rows as asked for, or the byte budget cut it (less than one of its rows
		// left): more may be waiting.
		full[i] = len(got) == limit || (len(got) > 0 && leftBytes-gotBytes < gotBytes/int64(len(got)))
		reached[i] = true
		leftRows -= len(got)
		leftBytes -= gotBytes
		return leftRows > 0 && (len(events) == 0 || leftBytes > 0)
	}
	anyFull := false
	for k, i := range order {
		limit := min(limits[i], leftRows)
		if k == len(order)-1 && !anyFull {
			// The last share takes all that is left at once: the second pass would give it the rest
			// anyway, as the only share that may have filled its part. One statement less a round.
			limit = leftRows
		}
		if !claimShare(i, limit) {
			return events, bad, err
		}
		anyFull = anyFull || full[i]
	}
	for _, i := range order {
		if full[i] && !claimShare(i, leftRows) {
			return events, bad, err
		}
	}
	return events, bad, nil
}
