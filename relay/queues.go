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

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// maxQueueWeight is the largest weight of Config.Queues.
const maxQueueWeight = 1_000_000

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

// claimUnkeyed appends to rr up to n unkeyed rows within budget bytes. Without Config.Queues it is the
// FIFO claim (store.ClaimSQL). With it, the rows are claimed share by share (see plan), each share on its
// own queues' index, so that a backlog in one queue does not delay another; a share that had fewer rows
// than its part leaves the rest of it to the shares that filled theirs, in the same order. Each claim
// takes at least one row even past the budget (see store.Budgeted): with Queues, a round can go over by
// one row per share it claims from.
func (c *rowReader) claimUnkeyed(ctx context.Context, tx bun.Tx, rr rowsRead, n int,
	budget int64, windowed bool,
) ([]model.Event, map[int]error, error) {
	fq := c.queues
	if fq == nil {
		err := rr.take(budget, func(rd store.Read) ([]model.Event, error) { return c.claims.Unkeyed(ctx, tx, rd, windowed, n) })
		return rr.events, rr.bad, err
	}
	shares := fq.named
	rest, err := c.claims.RestQueues(ctx, tx, fq.names)
	if err != nil {
		return nil, nil, fmt.Errorf("list the queues not named in Queues: %w", err)
	}
	if len(rest) > 0 {
		shares = append(slices.Clip(shares), queueShare{queues: rest, weight: 1})
	}
	order, limits := fq.plan(n, shares)
	after := make([]int64, len(shares))
	full := make([]bool, len(shares))
	reached := make([]bool, len(shares))
	leftRows, leftBytes := n, budget
	defer func() {
		if err == nil {
			fq.lane.note(fq, shares, reached, full)
		}
	}()
	claimShare := func(i, limit int) bool {
		before := len(rr.events)
		err = rr.take(leftBytes, func(rd store.Read) ([]model.Event, error) {
			return c.claims.Queue(ctx, tx, rd, windowed, shares[i].queues, after[i], limit)
		})
		if err != nil {
			return false
		}
		got := rr.events[before:]
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
		return leftRows > 0 && (len(rr.events) == 0 || leftBytes > 0)
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
			return rr.events, rr.bad, err
		}
		anyFull = anyFull || full[i]
	}
	for _, i := range order {
		if full[i] && !claimShare(i, leftRows) {
			return rr.events, rr.bad, err
		}
	}
	return rr.events, rr.bad, nil
}
