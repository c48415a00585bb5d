package store

import (
	"database/sql"
	"time"

	"github.com/bunbox/bunbox/model"
)

// Columns are the columns every read of rows to deliver selects, the per-row claims and the stream's read
// alike, in the order Scan scans them; each read adds row_size (RowSize) after them.
const Columns = `id, event_id, event_name, queue, payload, metadata, created_at, attempts,
  process_at, max_retry, coalesce(timeout_ns, 0), deadline, coalesce(task_group, ''), coalesce(retention_ns, 0),
  coalesce(ordering_key, ''), payload_encoded`

// RowSize is the size in bytes of a read row's payload and metadata, and of its encoded payload
// (a Location's Codec, or the bytes of model.NewBytesEvent), as the relay receives them.
//
// A row's size is the JSON text the relay receives (octet_length of the text form) for a value PostgreSQL
// stored compressed, whose stored size could be a tiny part of it; for any other value it is the stored
// size (pg_column_size), which is close to the text's and costs no conversion: most rows are small and
// stored as they are. pg_column_compression needs PostgreSQL 14 or later. The encoded payload counts its
// bytes (octet_length of a bytea reads its header, not its data): the bytes of a bytes event may be
// stored compressed. A payload the relay decodes (a Location's Codec) is counted apart.
const RowSize = `CASE WHEN pg_column_compression(payload) IS NULL THEN pg_column_size(payload)
    ELSE octet_length(payload::text) END
  + CASE WHEN pg_column_compression(metadata) IS NULL THEN pg_column_size(metadata)
    ELSE octet_length(metadata::text) END
  + coalesce(octet_length(payload_encoded), 0)`

// columnCount is how many destinations a row of Columns and row_size takes.
const columnCount = 17

// Scan reads the rows of a read of rows to deliver (Columns, row_size, then the read's own columns into
// extra, the same destinations for every row) and appends them to events. It stops before the first row
// that would take the rows it appended over budget bytes, unless it is the first (the rows past it stay
// locked until the round ends, and are read again by a later one), and reports that it cut there. For each
// row it keeps it calls kept with the row's index in events, the row, and its metadata column, valid only until
// the next row: the caller decodes it at once. It closes rows. The scan is by hand rather than through
// bun's model scan: it is the relay's hottest read.
func Scan(rows *sql.Rows, events []model.Event, budget int64, extra []any, kept func(i int, ev *model.Event, metadata []byte)) (
	_ []model.Event, cut bool, err error,
) {
	defer rows.Close() // reads and drops the rows past the budget
	var metadata sql.RawBytes
	var timeoutNs, retentionNs, size, taken int64
	// One slice of destinations for every row: each row's are set into it, pointers into its slot of
	// events (a row's own variables would escape to the heap, an allocation per row).
	dest := make([]any, columnCount+len(extra))
	copy(dest[columnCount:], extra)
	dest[5], dest[10], dest[13], dest[16] = &metadata, &timeoutNs, &retentionNs, &size
	first := len(events)
	for rows.Next() {
		i := len(events)
		events = append(events, model.Event{}) // scanned in place
		ev := &events[i]
		dest[0], dest[1], dest[2], dest[3], dest[4] = &ev.ID, &ev.EventID, &ev.Name, &ev.Queue, (*[]byte)(&ev.Payload)
		dest[6], dest[7], dest[8], dest[9] = &ev.CreatedAt, &ev.Attempts, &ev.ProcessAt, &ev.MaxRetry
		dest[11], dest[12], dest[14], dest[15] = &ev.Deadline, &ev.Group, &ev.OrderingKey, &ev.PayloadEncoded
		if err := rows.Scan(dest...); err != nil {
			return nil, false, err
		}
		if i > first && taken+size > budget {
			events[i] = model.Event{} // not kept: let its payload go, and leave the slot zero
			return events[:i], true, rows.Err()
		}
		taken += size
		ev.Timeout, ev.TaskRetention = time.Duration(timeoutNs), time.Duration(retentionNs)
		kept(i, ev, metadata)
	}
	return events, false, rows.Err()
}
