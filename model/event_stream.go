package model

import (
	"context"
	"errors"
	"reflect"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// A row written while the stream is on (relay.EnableStream) holds published_at = 'infinity', which
// neither driver scans into a time (pgdriver fails while it reads the row). Event's bun hooks keep plain
// bun working on such rows: a SELECT reads published_at with 'infinity' as NULL, and an INSERT leaves the
// column to its default so that RETURNING does not read 'infinity' back. See Event.PublishedAt for what
// they cover.

var (
	_ bun.BeforeSelectHook = (*Event)(nil)
	_ bun.BeforeInsertHook = (*Event)(nil)
)

// publishedAtColumn is the select-list expression that reads published_at with a streamed row's
// 'infinity' as NULL, qualified with the query's alias for the outbox table (oe unless the query says
// otherwise) so that a joined table's published_at cannot make it ambiguous.
const publishedAtColumn = "nullif(?TableAlias.published_at, 'infinity') AS published_at"

// errProbe is set on a clone of a query to tell whether ExcludeColumn failed before it.
var errProbe = errors.New("model: column probe")

// BeforeSelect is bun's hook (bun.BeforeSelectHook), run by SelectQuery.Scan and ScanAndCount before a
// query of Event rows: it reads published_at as nullif(published_at, 'infinity'), so that a row the
// stream wrote reads with a nil PublishedAt instead of failing the scan. It changes nothing when the
// query does not select published_at by that name (a Column list without it, an ExcludeColumn of it, a
// ColumnExpr of the caller's own), so an explicit column list is kept as given.
func (*Event) BeforeSelect(_ context.Context, q *bun.SelectQuery) error {
	if selectsPublishedAt(q) {
		q.ExcludeColumn("published_at").ColumnExpr(publishedAtColumn)
	}
	return nil
}

// selectsPublishedAt reports whether q selects the published_at column as bun's own column (every
// column, or a Column list naming it). It asks bun on a clone of q: ExcludeColumn fails there when the
// column is not selected that way, and that error comes before errProbe.
func selectsPublishedAt(q *bun.SelectQuery) bool {
	_, err := q.Clone().ExcludeColumn("published_at").Err(errProbe).AppendQuery(schema.NewNopQueryGen(), nil)
	return errors.Is(err, errProbe)
}

// BeforeInsert is bun's hook (bun.BeforeInsertHook), run by InsertQuery.Exec and Scan before an insert of
// Event rows: when no row sets PublishedAt, it leaves published_at out of the insert, so that the column
// takes its default ('infinity' while the stream is on, NULL otherwise; the same value bun's DEFAULT would
// write) and bun's RETURNING does not read it back. It changes nothing when a row sets PublishedAt, when
// the query gives published_at a Value, or when its column list leaves published_at out already.
func (*Event) BeforeInsert(_ context.Context, q *bun.InsertQuery) error {
	if noneSetsPublishedAt(q.GetModel().Value()) && insertsPublishedAt(q) {
		q.ExcludeColumn("published_at")
	}
	return nil
}

// noneSetsPublishedAt reports whether every row of an insert's model (*Event, *[]Event or *[]*Event) has
// a nil PublishedAt; false for any other model.
func noneSetsPublishedAt(v any) bool {
	switch m := v.(type) {
	case *Event:
		return m != nil && m.PublishedAt == nil
	case *[]Event:
		for i := range *m {
			if (*m)[i].PublishedAt != nil {
				return false
			}
		}
		return m != nil
	case *[]*Event:
		for _, ev := range *m {
			if ev != nil && ev.PublishedAt != nil {
				return false
			}
		}
		return m != nil
	}
	return false
}

// insertsPublishedAt reports whether q writes published_at from the model: its column list is bun's
// default (every column) or names published_at, and no Value replaces it. bun's InsertQuery has no Clone
// and no getter for its columns, so this reads bun v1.3.0's unexported fields (columns, modelValues)
// through reflection, read-only; if they are not there (another bun), it reports false and the hook
// leaves the query as bun builds it.
func insertsPublishedAt(q *bun.InsertQuery) bool {
	v := reflect.ValueOf(q).Elem()
	cols, vals := v.FieldByName("columns"), v.FieldByName("modelValues")
	if !cols.IsValid() || cols.Kind() != reflect.Slice || !vals.IsValid() || vals.Kind() != reflect.Map {
		return false
	}
	if vals.Len() > 0 && vals.MapIndex(reflect.ValueOf("published_at")).IsValid() {
		return false
	}
	if cols.IsNil() {
		return true
	}
	for i := range cols.Len() {
		col := cols.Index(i)
		query, args := col.FieldByName("Query"), col.FieldByName("Args")
		if !query.IsValid() || query.Kind() != reflect.String || !args.IsValid() || args.Kind() != reflect.Slice {
			return false
		}
		if query.String() == "published_at" && args.IsNil() {
			return true
		}
	}
	return false
}
