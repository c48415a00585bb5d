package relay

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// claimSizer sizes the next claim from the rows of the last one. A budgeted claim measures every row the
// claim locks, and measuring a compressed payload costs PostgreSQL its decompression: a claim of
// BatchSize rows of 1 MiB would decompress BatchSize MiB to return the few that fit in the budget. So the
// claim asks for about as many rows as the budget holds at the last claim's mean row size, with a quarter
// more and one row to spare, and never more than BatchSize.
type claimSizer struct {
	meanRow atomic.Int64 // bytes of payload and metadata per row in the last claim; 0 before the first
}

// sampleRows is how many rows at the head of the line sample measures.
const sampleRows = 8

// sample sets the mean row size, before a relay's first claim, to the size of the largest of the first
// sampleRows pending rows in id order: without it the first claim would lock BatchSize rows, and
// PostgreSQL would read and measure every one of them (BatchSize rows of 1 MiB) to return what fits in
// BatchBytes. It measures a few rows as the claim does (store.RowSize), and leaves the mean unknown when no
// row is pending.
func (s *claimSizer) sample(ctx context.Context, db bun.IDB, claims *store.Claims) error {
	size, err := claims.SampleSize(ctx, db, sampleRows)
	if err != nil {
		return fmt.Errorf("sample row sizes: %w", err)
	}
	if size.Valid && size.Int64 > 0 {
		s.meanRow.CompareAndSwap(0, size.Int64)
	}
	return nil
}

// limit is how many rows the next claim locks.
func (s *claimSizer) limit(batchSize int, budget int64) int {
	mean := s.meanRow.Load()
	if mean <= 0 {
		return batchSize
	}
	n := budget/mean + budget/mean/4 + 1
	return int(min(int64(batchSize), n))
}

// windowed reports whether a claim of limit rows should cut at the budget in PostgreSQL (store.Budgeted) rather
// than as the relay reads the rows (store.Scan): a row past the budget is still sent to the relay and dropped
// there, so the cheap claim runs only when the last claim's rows were so small that limit of them make a
// quarter of the budget at most. The first claim, and any after a claim of large rows, is windowed, so a
// batch of large rows is never sent whole to be dropped.
func (s *claimSizer) windowed(limit int, budget int64) bool {
	mean := s.meanRow.Load()
	return mean <= 0 || int64(limit)*mean > budget/4
}

// observe records the rows of a claim that asked for limit rows with budget, and reports whether it came
// back full: as many rows as asked for, or so many bytes that the next row would likely not have fit.
// More rows may then be waiting.
func (s *claimSizer) observe(events []model.Event, limit int, budget int64) (full bool) {
	if len(events) == 0 {
		return false
	}
	total := claimedBytes(events)
	mean := max(total/int64(len(events)), 1)
	s.meanRow.Store(mean)
	return len(events) >= limit || total+mean > budget
}

// claimedBytes is about the bytes of payload and metadata of events.
func claimedBytes(events []model.Event) int64 {
	var total int64
	for i := range events {
		total += int64(len(events[i].Payload)+len(events[i].PayloadEncoded)) + metadataSize(events[i].Metadata)
	}
	return total
}

// metadataSize is about the bytes of md as a JSON object.
func metadataSize(md map[string]string) int64 {
	n := int64(2)
	for k, v := range md {
		n += int64(len(k) + len(v) + 6)
	}
	return n
}
