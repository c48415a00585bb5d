package bunx

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"

	"github.com/uptrace/bun"
)

// ErrNoQueryHook is wrapped by the error of a model hook that ran for a query of a *bun.DB without bunx's
// query hook: bunx cannot count the rows such a statement touched (an UPDATE that matched nothing, a row ON
// CONFLICT DO NOTHING skipped), so it writes no event for them and fails the statement. Such a *bun.DB is
// a clone made before bunx.New (db.WithNamedArg copies the hooks the db has at that moment), or a second
// bun.NewDB over the same *sql.DB.
var ErrNoQueryHook = errors.New("bunx: this query ran on a *bun.DB without bunx's query hook, so bunx cannot count " +
	"the rows it touched and writes no event for them: make clones such as db.WithNamedArg after bunx.New (or call " +
	"bunx.New on that *bun.DB too), or record the events with Outbox.Record")

// ErrModelNotRows is wrapped by the error of a model hook whose statement changed rows the model value does not
// describe, for which a handler would build its events from values that are not the rows': an UPDATE with
// Set, Column, ExcludeColumn, Value, OmitZero or a WHERE of its own (anything but the full model by its
// primary key), a DELETE with a WHERE of its own (anything but by primary key), or a statement that touched
// more rows than the model holds. Record such events with
// Outbox.Record, from what the statement returned.
var ErrModelNotRows = errors.New("bunx: the model value does not describe the rows the statement changed")

// describesRows returns an error wrapping ErrModelNotRows unless q's rows are exactly its model's:
//
//   - an UPDATE sets every column from the model and selects its rows by primary key: Model(&row).WherePK()
//     for a single row, Model(&rows).Bulk() for a slice;
//   - a DELETE selects its rows by primary key: Model(&row).WherePK() or Model(&rows).WherePK(). A model with
//     a soft delete column is not checked (formatting its DELETE again would stamp a new deleted_at on the
//     caller's model); the count still is (see touchedRows).
//
// RETURNING is allowed. It compares q's SQL with the SQL of that canonical query on the same model value and
// database, so that whatever bun adds (soft delete conditions, named arguments) is on both sides. An INSERT's
// rows are its model's.
func describesRows(q hookQuery, typ reflect.Type, val reflect.Value) error {
	var (
		got, want []byte
		err       error
		form      string
	)
	db, v := q.DB(), q.GetModel().Value()
	gen := db.QueryGen()
	switch q := q.(type) {
	case *bun.UpdateQuery:
		canon := db.NewUpdate().Model(v)
		if val.Kind() == reflect.Slice {
			canon, form = canon.Bulk(), "an update hook records events only for Model(&rows).Bulk()"
		} else {
			canon, form = canon.WherePK(), "an update hook records events only for Model(&row).WherePK()"
		}
		form += ", a full-model update by primary key without Set, Column, ExcludeColumn, Value, OmitZero or a Where of its own"
		if got, err = q.AppendQuery(gen, nil); err == nil {
			want, err = canon.AppendQuery(gen, nil)
		}
	case *bun.DeleteQuery:
		if db.Table(typ).SoftDeleteField != nil {
			return nil
		}
		form = "a delete hook records events only for Model(&row).WherePK() or Model(&rows).WherePK(), without a Where of its own"
		if got, err = q.AppendQuery(gen, nil); err == nil {
			want, err = db.NewDelete().Model(v).WherePK().AppendQuery(gen, nil)
		}
	default:
		return nil
	}
	if err == nil && (bytes.Equal(got, want) || bytes.HasPrefix(got, append(want, " RETURNING "...))) {
		return nil
	}
	return fmt.Errorf("%w: %s: write that, or record the events of this statement with Outbox.Record", ErrModelNotRows, form)
}
