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
// primary key), or a statement that touched more rows than the model holds. Record such events with
// Outbox.Record, from what the statement returned.
var ErrModelNotRows = errors.New("bunx: the model value does not describe the rows the statement changed")

// describesRows returns an error wrapping ErrModelNotRows unless q is an UPDATE whose rows are exactly the
// model's, every column set from it: Model(&row).WherePK() for a single row, Model(&rows).Bulk() for a
// slice, with RETURNING allowed. It compares q's SQL with the SQL of that canonical query on the same model
// value and database, so that whatever bun adds (soft delete conditions, named arguments) is on both sides.
// Other operations are not checked here: an INSERT's rows are its model's, and a DELETE changes no column.
func describesRows(q hookQuery, op op, val reflect.Value) error {
	uq, ok := q.(*bun.UpdateQuery)
	if op != opUpdate || !ok {
		return nil
	}
	gen := q.DB().QueryGen()
	got, err := uq.AppendQuery(gen, nil)
	if err != nil {
		return err
	}
	canon := q.DB().NewUpdate().Model(q.GetModel().Value())
	if val.Kind() == reflect.Slice {
		canon = canon.Bulk()
	} else {
		canon = canon.WherePK()
	}
	want, err := canon.AppendQuery(gen, nil)
	if err == nil && (bytes.Equal(got, want) || bytes.HasPrefix(got, append(want, " RETURNING "...))) {
		return nil
	}
	form := "Model(&row).WherePK()"
	if val.Kind() == reflect.Slice {
		form = "Model(&rows).Bulk()"
	}
	return fmt.Errorf("%w: an update hook records events only for a full-model update by primary key (%s, without Set, "+
		"Column, ExcludeColumn, Value, OmitZero or a Where of its own): write that, or record the events of this update "+
		"with Outbox.Record", ErrModelNotRows, form)
}
