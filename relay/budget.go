package relay

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// budgeted wraps a sized claim query (claimSizedSQL or keyedClaimSizedSQL) so that PostgreSQL stops it
// at a byte budget: of the rows the query locks, in id order, it returns the longest run whose payload
// and metadata fit in the budget, and always the first row, however large. Since the run is a prefix in
// id order, it is the rows up to a cutoff id, so the result has the query's own columns, whatever they
// are. The rows locked beyond the budget are released when the round's transaction ends. Arguments: the
// query's own (the batch size), then the budget in bytes.
//
// The window over the locked rows costs PostgreSQL about as much again as the claim of small rows itself
// (BenchmarkClaim), so the relay runs it only when the rows may be large (see claimSizer.windowed); the
// sized claim's rows are then cut at the same place by claimBy as it reads them.
func budgeted(query string) string {
	return `WITH claimed AS MATERIALIZED (
` + query + `
)
SELECT * FROM claimed WHERE id <= (
  SELECT max(id) FROM (
    SELECT id, row_number() OVER w AS n, sum(row_size) OVER w AS running
    FROM claimed WINDOW w AS (ORDER BY id)
  ) sized
  WHERE n = 1 OR running <= ?
)
ORDER BY id`
}

// The relay's claims: claimSQL and keyedClaimSQL with one more column, row_size (rowSizeSQL), and the
// same two under the byte budget's window.
var (
	claimSizedSQL       = `SELECT ` + claimColumns + `, ` + rowSizeSQL + ` AS row_size` + claimFrom
	keyedClaimSizedSQL  = keyedHeadsSQL + `SELECT ` + claimColumns + `, ` + rowSizeSQL + ` AS row_size` + keyedClaimFrom
	claimBudgetSQL      = budgeted(claimSizedSQL)
	keyedClaimBudgetSQL = budgeted(keyedClaimSizedSQL)
)

// claimQuery is the keyed or the unkeyed claim, with the byte budget's window or without.
func claimQuery(keyed, windowed bool) string {
	switch {
	case keyed && windowed:
		return keyedClaimBudgetSQL
	case keyed:
		return keyedClaimSizedSQL
	case windowed:
		return claimBudgetSQL
	}
	return claimSizedSQL
}

// rowSizeSQL is the size in bytes of a claimed row's payload and metadata, and of its encoded payload
// (bunx.WithCodec, or the bytes of model.NewBytesEvent), as the relay receives them.
//
// A row's size is the JSON text the relay receives (octet_length of the text form) for a value PostgreSQL
// stored compressed, whose stored size could be a tiny part of it; for any other value it is the stored
// size (pg_column_size), which is close to the text's and costs no conversion: most rows are small and
// stored as they are. pg_column_compression needs PostgreSQL 14 or later. The encoded payload counts its
// bytes (octet_length of a bytea reads its header, not its data): the bytes of a bytes event may be
// stored compressed. A payload the relay decodes (Config.Location.Codec) is counted apart (decodedBudget).
const rowSizeSQL = `CASE WHEN pg_column_compression(payload) IS NULL THEN pg_column_size(payload)
    ELSE octet_length(payload::text) END
  + CASE WHEN pg_column_compression(metadata) IS NULL THEN pg_column_size(metadata)
    ELSE octet_length(metadata::text) END
  + coalesce(octet_length(payload_encoded), 0)`

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
// BatchBytes. It measures a few rows as the claim does (rowSizeSQL), and leaves the mean unknown when no
// row is pending.
func (s *claimSizer) sample(ctx context.Context, db bun.IDB, names tables.Names) error {
	var size sql.NullInt64
	if err := db.NewRaw(names.SQL(`SELECT max(`+rowSizeSQL+`) FROM (SELECT payload, metadata, payload_encoded FROM outbox_events
WHERE published_at IS NULL AND dead_at IS NULL ORDER BY id LIMIT ?) AS head`), sampleRows).Scan(ctx, &size); err != nil {
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

// windowed reports whether a claim of limit rows should cut at the budget in PostgreSQL (budgeted) rather
// than as the relay reads the rows (claimBy): a row past the budget is still sent to the relay and dropped
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
