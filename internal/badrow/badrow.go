// Package badrow reads outbox rows for the operator's views (admin, the CLI, the page) leniently: a row
// that raw SQL wrote around bunx, with metadata that is not a JSON object of strings ({"k": 5}, [1], "s")
// or a time that is not finite ('infinity' where bun expects a time), still reads into a model.Event, and
// is shown as bad rather than failing the whole list. The columns are rewritten in SQL, so bun's scan of
// model.Event cannot fail on them:
//
//   - metadata is the row's metadata when it is an object of strings; otherwise an object holding only
//     Marker, whose value says what is wrong and quotes the column (cut to 200 characters);
//   - a time column that is not finite reads as NULL (the zero time for created_at), and Marker is added
//     to the metadata naming it. published_at = 'infinity' is no fault: it marks a row of the stream
//     (relay.EnableStream), whose publish time the caller shows its own way (streamsql.PublishedAt); it
//     reads as NULL.
package badrow

import (
	"strings"

	"github.com/uptrace/bun"
)

// Marker is the metadata key under which a row read through Select carries what is wrong with it. The
// relay refuses such rows (their metadata cannot become task headers) and marks them dead; the views list
// them with the others.
const Marker = "bunbox-bad-row"

// times are model.Event's time columns besides published_at, which Select reads apart.
var times = []string{"created_at", "process_at", "deadline", "next_attempt_at", "dead_at", "completed_at"}

// metadataFault is a condition on metadata column m: true when it is not a JSON object of strings, or
// JSON null (what bun writes for a nil map). The nested CASE keeps jsonb_each from reading a column that
// is not an object.
func metadataFault(m string) string {
	return `CASE WHEN jsonb_typeof(` + m + `) = 'null' THEN false
  WHEN jsonb_typeof(` + m + `) IS DISTINCT FROM 'object' THEN true
  ELSE EXISTS (SELECT 1 FROM jsonb_each(` + m + `) AS kv WHERE jsonb_typeof(kv.value) <> 'string') END`
}

// faults is a text expression listing what is wrong with the times of the row aliased a, "; "-separated,
// NULL-free (empty when nothing is). published is the published_at expression the caller reads.
func faults(a, published string) string {
	parts := make([]string, 0, len(times)+1)
	for _, c := range times {
		parts = append(parts, `CASE WHEN NOT isfinite(`+a+`.`+c+`) THEN '`+c+` is ' || `+a+`.`+c+`::text END`)
	}
	parts = append(parts, `CASE WHEN `+published+` = '-infinity' THEN 'published_at is -infinity' END`)
	return `concat_ws('; ', ` + strings.Join(parts, ", ") + `)`
}

// MetadataExpr is the SQL expression of the metadata of the row aliased a (see the package doc).
// published is the published_at expression the caller reads (a.published_at, or its own).
func MetadataExpr(a, published string) string {
	m := a + `.metadata`
	f := faults(a, published)
	return `(CASE WHEN ` + metadataFault(m) + `
  THEN jsonb_build_object('` + Marker + `', concat_ws('; ', 'metadata ' || left(` + m + `::text, 200) || ' is not a JSON object of strings', nullif(` + f + `, '')))
  WHEN ` + f + ` <> '' THEN coalesce(nullif(` + m + `, 'null'), '{}') || jsonb_build_object('` + Marker + `', ` + f + `)
  ELSE ` + m + ` END)`
}

// TimeExpr is the SQL expression of time column c of the row aliased a: the column, or NULL when it is
// not finite.
func TimeExpr(a, c string) string {
	return `(CASE WHEN isfinite(` + a + `.` + c + `) THEN ` + a + `.` + c + ` END)`
}

// Select makes q, a SELECT of model.Event rows from a table aliased a, read them leniently: metadata and
// the times as the package doc says. published is the published_at expression the caller reads:
// a.published_at, or its own (the page's, with the stream's publish time); a non-finite one reads as NULL.
func Select(q *bun.SelectQuery, a, published string) *bun.SelectQuery {
	q = q.ExcludeColumn(append([]string{"metadata", "published_at"}, times...)...)
	for _, c := range times {
		q = q.ColumnExpr(TimeExpr(a, c) + ` AS ` + c)
	}
	return q.ColumnExpr(`(CASE WHEN isfinite(` + published + `) THEN ` + published + ` END) AS published_at`).
		ColumnExpr(MetadataExpr(a, published) + ` AS metadata`)
}

// Problem returns what is wrong with a row read through Select, from its metadata; "" for a good row.
func Problem(metadata map[string]string) string {
	return metadata[Marker]
}
