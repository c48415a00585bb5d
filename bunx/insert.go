package bunx

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"github.com/google/uuid"
	"github.com/uptrace/bun/schema"

	"github.com/bunbox/bunbox/model"
)

// The outbox INSERT is built here by hand rather than by bun's model insert: bun's reflection over every
// field of model.Event, the DEFAULT and NULL it writes for each column the producer does not set, and the
// RETURNING it scans back cost the business transaction more than the row itself (see BENCHMARKS.md).
// The statement names only the columns a producer sets; PostgreSQL fills the others with their defaults.

// eventColumn is one column of outbox_events that the insert writes, and how its value is appended as SQL.
// An optional column has set: the statement names it only when one of its events sets it, and appends
// NULL for the others, as bun's nullzero did.
type eventColumn struct {
	name   string
	set    func(ev *model.Event) bool
	append func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error)
	arg    func(ev *model.Event) (any, error) // the value as an argument of the prepared statement
	// fill: a row that does not set the column still gets its value from append or arg (the column is NOT
	// NULL, and the value says "none"), rather than NULL.
	fill bool
}

// null reports whether the statement writes NULL into column c for ev.
func (c eventColumn) null(ev *model.Event) bool { return c.set != nil && !c.fill && !c.set(ev) }

// eventColumns are the columns the insert writes, in order. A new column of model.Event that producers
// set is one more entry here (TestEventColumnsCoverTheModel fails until it is); a column the relay sets
// (published_at, attempts, ...) stays out and keeps its default.
var eventColumns = []eventColumn{
	{"event_id", nil, func(_ schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
		return appendUUID(b, ev.EventID), nil
	}, func(ev *model.Event) (any, error) { return ev.EventID.String(), nil }, false},
	{"event_name", nil, func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
		return d.AppendString(b, ev.Name), nil
	}, func(ev *model.Event) (any, error) { return ev.Name, nil }, false},
	{"queue", nil, func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
		return d.AppendString(b, ev.Queue), nil
	}, func(ev *model.Event) (any, error) { return ev.Queue, nil }, false},
	{"payload", nil, func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
		return d.AppendJSON(b, ev.Payload), nil
	}, payloadArg, false},
	{"payload_encoded", func(ev *model.Event) bool { return ev.PayloadEncoded != nil },
		func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
			return d.AppendBytes(b, ev.PayloadEncoded), nil
		}, func(ev *model.Event) (any, error) { return ev.PayloadEncoded, nil }, false},
	{"metadata", func(ev *model.Event) bool { return len(ev.Metadata) > 0 }, appendMetadata, metadataArg, true},
	{"process_at", func(ev *model.Event) bool { return ev.ProcessAt != nil },
		func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
			return d.AppendTime(b, *ev.ProcessAt), nil
		}, func(ev *model.Event) (any, error) { return *ev.ProcessAt, nil }, false},
	{"max_retry", func(ev *model.Event) bool { return ev.MaxRetry != nil },
		func(_ schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
			return strconv.AppendInt(b, int64(*ev.MaxRetry), 10), nil
		}, func(ev *model.Event) (any, error) { return int64(*ev.MaxRetry), nil }, false},
	{"timeout_ns", func(ev *model.Event) bool { return ev.Timeout != 0 },
		func(_ schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
			return strconv.AppendInt(b, int64(ev.Timeout), 10), nil
		}, func(ev *model.Event) (any, error) { return int64(ev.Timeout), nil }, false},
	{"deadline", func(ev *model.Event) bool { return ev.Deadline != nil },
		func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
			return d.AppendTime(b, *ev.Deadline), nil
		}, func(ev *model.Event) (any, error) { return *ev.Deadline, nil }, false},
	{"task_group", func(ev *model.Event) bool { return ev.Group != "" },
		func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
			return d.AppendString(b, ev.Group), nil
		}, func(ev *model.Event) (any, error) { return ev.Group, nil }, false},
	{"retention_ns", func(ev *model.Event) bool { return ev.TaskRetention != 0 },
		func(_ schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
			return strconv.AppendInt(b, int64(ev.TaskRetention), 10), nil
		}, func(ev *model.Event) (any, error) { return int64(ev.TaskRetention), nil }, false},
	{"ordering_key", func(ev *model.Event) bool { return ev.OrderingKey != "" },
		func(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
			return d.AppendString(b, ev.OrderingKey), nil
		}, func(ev *model.Event) (any, error) { return ev.OrderingKey, nil }, false},
}

// columnSet is a set of eventColumns: bit i is eventColumns[i].
type columnSet uint16

func init() {
	if len(eventColumns) > 16 {
		panic("bunx: eventColumns outgrew columnSet")
	}
}

func (s columnSet) has(i int) bool { return s&(1<<i) != 0 }

// namedColumns returns the columns the INSERT of events names: each column every event sets, and an
// optional one when one of the events sets it.
func namedColumns(events []*model.Event) columnSet {
	var s columnSet
	for i, c := range eventColumns {
		if c.set == nil || slices.ContainsFunc(events, c.set) {
			s |= 1 << i
		}
	}
	return s
}

// insertReturning is what Record reads back into each event: created_at as microseconds since the Unix
// epoch, which the client reads as an integer rather than parsing the text of a timestamp (see
// scanReturning).
const insertReturning = " RETURNING id, (extract(epoch FROM created_at) * 1000000)::int8"

var insertBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// insertSQL returns the INSERT of events into table (tables.Names.Outbox) for dialect d, with
// insertReturning when returning is set.
func insertSQL(d schema.Dialect, table string, events []*model.Event, returning bool) (string, error) {
	used := namedColumns(events)
	bp := insertBufs.Get().(*[]byte)
	defer insertBufs.Put(bp)
	b := append(append(append((*bp)[:0], "INSERT INTO "...), table...), " ("...)
	sep := ""
	for i, c := range eventColumns {
		if used.has(i) {
			b = append(append(b, sep...), c.name...)
			sep = ", "
		}
	}
	b = append(b, ") VALUES "...)
	var err error
	for i, ev := range events {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		sep := ""
		for j, c := range eventColumns {
			if !used.has(j) {
				continue
			}
			b = append(b, sep...)
			sep = ", "
			if c.null(ev) {
				b = append(b, "NULL"...)
			} else if b, err = c.append(d, b, ev); err != nil {
				return "", columnError(ev, c, err)
			}
		}
		b = append(b, ')')
	}
	if returning {
		b = append(b, insertReturning...)
	}
	*bp = b
	return string(b), nil
}

// appendUUID appends id as a quoted literal in its canonical form.
func appendUUID(b []byte, id uuid.UUID) []byte {
	var s [36]byte
	hex.Encode(s[0:8], id[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], id[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], id[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], id[8:10])
	s[23] = '-'
	hex.Encode(s[24:], id[10:])
	b = append(b, '\'')
	b = append(b, s[:]...)
	return append(b, '\'')
}

// columnError is the error of a column whose value cannot be written.
func columnError(ev *model.Event, c eventColumn, err error) error {
	return fmt.Errorf("%w %q: %s: %w", model.ErrInvalidEvent, ev.Name, c.name, err)
}

// payloadArg is the payload as the text of a jsonb argument. The string shares the payload's bytes rather
// than copying them (a payload may be megabytes): the driver only reads it, during the statement.
func payloadArg(ev *model.Event) (any, error) {
	return unsafe.String(unsafe.SliceData(ev.Payload), len(ev.Payload)), nil
}

// metadataArg is the metadata as the text of a jsonb argument; none is the empty object.
func metadataArg(ev *model.Event) (any, error) {
	if len(ev.Metadata) == 0 {
		return "{}", nil
	}
	data, err := json.Marshal(ev.Metadata)
	if err != nil {
		return nil, err
	}
	return string(data), nil
}

// appendMetadata appends the metadata as a jsonb literal; none is the empty object.
func appendMetadata(d schema.Dialect, b []byte, ev *model.Event) ([]byte, error) {
	if len(ev.Metadata) == 0 {
		return append(b, "'{}'"...), nil
	}
	data, err := json.Marshal(ev.Metadata)
	if err != nil {
		return nil, err
	}
	return d.AppendJSON(b, data), nil
}
