package bunx

import (
	"context"
	"fmt"
	"reflect"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// Hooks records, when embedded in a bun model, the events registered for the model's type with OnInsert,
// OnUpdate and OnDelete after each insert, update and delete, on the query's own connection:
//
//	type Order struct {
//		bun.BaseModel `bun:"table:orders"`
//		bunx.Hooks    `bun:"-"`
//		...
//	}
//
// A model that has hook methods of its own calls AfterInsert, AfterUpdate or AfterDelete from them instead.
type Hooks struct{}

var (
	_ bun.AfterInsertHook = Hooks{}
	_ bun.AfterUpdateHook = Hooks{}
	_ bun.AfterDeleteHook = Hooks{}
)

// AfterInsert implements bun.AfterInsertHook by calling the package's AfterInsert.
func (Hooks) AfterInsert(ctx context.Context, q *bun.InsertQuery) error { return AfterInsert(ctx, q) }

// AfterUpdate implements bun.AfterUpdateHook by calling the package's AfterUpdate.
func (Hooks) AfterUpdate(ctx context.Context, q *bun.UpdateQuery) error { return AfterUpdate(ctx, q) }

// AfterDelete implements bun.AfterDeleteHook by calling the package's AfterDelete.
func (Hooks) AfterDelete(ctx context.Context, q *bun.DeleteQuery) error { return AfterDelete(ctx, q) }

// AfterInsert records the events of the OnInsert handlers registered for the query's model type, one call
// per inserted row, with q's connection. Models with an AfterInsert method of their own call it from there.
func AfterInsert(ctx context.Context, q *bun.InsertQuery) error { return runHooks(ctx, q, opInsert) }

// AfterUpdate records the events of the OnUpdate handlers registered for the query's model type, one call
// per row of the model, with q's connection. A set-based update (a nil model and a WHERE) yields none. An
// update other than the full model by primary key (Model(&row).WherePK(), Model(&rows).Bulk()) fails with
// ErrModelNotRows when handlers are registered: its model value does not describe the rows it changed.
func AfterUpdate(ctx context.Context, q *bun.UpdateQuery) error { return runHooks(ctx, q, opUpdate) }

// AfterDelete records the events of the OnDelete handlers registered for the query's model type, one call
// per row of the model, with q's connection. A set-based delete (a nil model and a WHERE) yields none. A
// delete other than by primary key (Model(&row).WherePK()) fails with ErrModelNotRows when handlers are
// registered, unless the model has a soft delete column.
func AfterDelete(ctx context.Context, q *bun.DeleteQuery) error { return runHooks(ctx, q, opDelete) }

// OnInsert registers fn to produce the events of each inserted row of type T. The events are written in
// the insert's transaction; an error from fn (or a panic in it) fails the insert and so the transaction.
// T is the struct type of the bun model, which embeds Hooks (or calls AfterInsert from its own hook).
//
// OnInsert panics when the registration could never fire: T has no AfterInsert method, or the one bun
// calls never reaches bunx.AfterInsert (T embeds Hooks but declares its own AfterInsert, which shadows
// Hooks', and does not call bunx.AfterInsert). To tell, it calls T's method once (per type and operation,
// for the process) on a zero value with a query whose database cannot connect, and ctx that makes
// bunx.AfterInsert return at once.
func OnInsert[T any](o *Outbox, fn func(ctx context.Context, row *T) ([]*model.Event, error)) {
	register(o, opInsert, fn)
}

// OnUpdate registers fn to produce the events of each updated row of type T; see OnInsert, and AfterUpdate
// for the updates whose rows a model value describes.
func OnUpdate[T any](o *Outbox, fn func(ctx context.Context, row *T) ([]*model.Event, error)) {
	register(o, opUpdate, fn)
}

// OnDelete registers fn to produce the events of each deleted row of type T; see OnInsert.
func OnDelete[T any](o *Outbox, fn func(ctx context.Context, row *T) ([]*model.Event, error)) {
	register(o, opDelete, fn)
}

type op int

const (
	opInsert op = iota
	opUpdate
	opDelete
)

func (o op) String() string { return [...]string{"OnInsert", "OnUpdate", "OnDelete"}[o] }

var hookTypes = [...]reflect.Type{
	opInsert: reflect.TypeFor[bun.AfterInsertHook](),
	opUpdate: reflect.TypeFor[bun.AfterUpdateHook](),
	opDelete: reflect.TypeFor[bun.AfterDeleteHook](),
}

type handlerFunc func(ctx context.Context, row any) ([]*model.Event, error)

// handlerSet holds the handlers of one model type, by operation.
type handlerSet [3][]handlerFunc

func register[T any](o *Outbox, op op, fn func(context.Context, *T) ([]*model.Event, error)) {
	typ := reflect.TypeFor[T]()
	switch {
	case o == nil:
		panic(fmt.Sprintf("bunx.%s: the Outbox is nil", op))
	case fn == nil:
		panic(fmt.Sprintf("bunx.%s[%s]: the handler is nil", op, typ))
	case typ.Kind() != reflect.Struct:
		panic(fmt.Sprintf("bunx.%s[%s]: the model type must be a struct", op, typ))
	case !reflect.PointerTo(typ).Implements(hookTypes[op]):
		// Without the hook method bun never calls bunx, and the events would silently never be written.
		name := [...]string{"AfterInsert", "AfterUpdate", "AfterDelete"}[op]
		panic(fmt.Sprintf("bunx.%s[%s]: %s has no %s method: embed bunx.Hooks (with `bun:\"-\"`) or call bunx.%s from its own %s",
			op, typ, typ, name, name, name))
	}
	if msg := verifyHook[T](o.db, op); msg != "" {
		panic(fmt.Sprintf("bunx.%s[%s]: %s", op, typ, msg))
	}
	h := func(ctx context.Context, row any) ([]*model.Event, error) { return fn(ctx, row.(*T)) }
	r := o.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	hs := r.handlers[typ]
	if hs == nil {
		hs = new(handlerSet)
		r.handlers[typ] = hs
	}
	hs[op] = append(hs[op], h)
}

func (r *registry) lookup(typ reflect.Type, op op) []handlerFunc {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if hs := r.handlers[typ]; hs != nil {
		return hs[op]
	}
	return nil
}

// handles reports whether a registry of b has handlers for op on typ.
func (b *binding) handles(typ reflect.Type, op op) bool {
	for _, r := range b.registries() {
		if len(r.lookup(typ, op)) > 0 {
			return true
		}
	}
	return false
}

// hookQuery is what the insert, update and delete queries have in common for the hooks.
type hookQuery interface {
	bun.Query
	DB() *bun.DB
	GetModel() bun.Model
	NewRaw(query string, args ...any) *bun.RawQuery
}

func runHooks(ctx context.Context, q hookQuery, op op) error {
	b := lookup(q.DB())
	if b == nil {
		return probeReached(ctx) // nil, unless registration is verifying the model's hook method
	}
	if q.GetModel() == nil {
		return nil
	}
	count := b.take(q) // nil: every row of the model was touched
	typ, val, ok := modelRows(q.GetModel().Value())
	if !ok {
		return nil
	}
	var (
		conn      sqlConn
		connFound bool
		stmts     *statements
		checked   bool
	)
	for _, r := range b.registries() {
		handlers := r.lookup(typ, op)
		if len(handlers) == 0 {
			continue
		}
		rows, err := hookRows(typ, val, op)
		if err != nil || len(rows) == 0 {
			return err
		}
		if !checked {
			checked = true
			if !b.isHooked(q.DB()) {
				return fmt.Errorf("bunx.%s[%s]: %w", op, typ, ErrNoQueryHook)
			}
			if err := describesRows(q, typ, val); err != nil {
				return fmt.Errorf("bunx.%s[%s]: %w", op, typ, err)
			}
		}
		if count != nil {
			if rows, err = touchedRows(typ, op, rows, count); err != nil || len(rows) == 0 {
				return err
			}
		}
		var events []*model.Event
		for _, row := range rows {
			for _, h := range handlers {
				evs, err := callHandler(ctx, h, row, typ, op)
				if err != nil {
					return err
				}
				events = append(events, evs...)
			}
		}
		if len(events) == 0 {
			continue
		}
		// The handler built the events and nobody reads them back: no RETURNING.
		if !connFound {
			conn, connFound = queryConn(q)
			stmts = b.statements()
		}
		err = r.write(ctx, q.DB().Dialect(), events, false, stmts, conn, func(ctx context.Context, query string) error {
			_, err := q.NewRaw("?", bun.Safe(query)).Exec(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("bunx.%s[%s]: %w", op, typ, err)
		}
	}
	return nil
}

// modelRows finds the struct type of a bun model value (*T, *[]T or *[]*T) and the value holding its
// rows: the *T itself or the slice.
func modelRows(v any) (reflect.Type, reflect.Value, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer {
		return nil, reflect.Value{}, false
	}
	t := rv.Type().Elem()
	switch {
	case t.Kind() == reflect.Struct:
		return t, rv, true
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		if rv.IsNil() {
			return t.Elem(), reflect.Value{}, true
		}
		return t.Elem(), rv.Elem(), true
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Pointer && t.Elem().Elem().Kind() == reflect.Struct:
		if rv.IsNil() {
			return t.Elem().Elem(), reflect.Value{}, true
		}
		return t.Elem().Elem(), rv.Elem(), true
	}
	return nil, reflect.Value{}, false
}

// hookRows returns a *T for each row of the model. A nil model has no rows: for an update or a delete that
// is a set-based query, which hooks cannot see; an insert needs rows, so it is an error.
func hookRows(typ reflect.Type, val reflect.Value, op op) ([]any, error) {
	if !val.IsValid() || (val.Kind() == reflect.Pointer && val.IsNil()) {
		if op == opInsert {
			return nil, fmt.Errorf("bunx.%s[%s]: the model is nil: there is no row to record events for", op, typ)
		}
		return nil, nil
	}
	if val.Kind() == reflect.Pointer {
		return []any{val.Interface()}, nil
	}
	rows := make([]any, 0, val.Len())
	for i := range val.Len() {
		el := val.Index(i)
		if el.Kind() != reflect.Pointer {
			el = el.Addr()
		} else if el.IsNil() {
			return nil, fmt.Errorf("bunx.%s[%s]: row %d of the model slice is nil", op, typ, i)
		}
		rows = append(rows, el.Interface())
	}
	return rows, nil
}

// touchedRows keeps the rows the statement touched, given how many rows the model had and how many the
// statement affected: all of them, or none. When only some rows of a slice were touched (ON CONFLICT DO
// NOTHING skipped some), nothing tells which (bun has even shortened the slice to the rows RETURNING gave
// back), and guessing could emit an event for a row that was not written: that fails the statement.
func touchedRows(typ reflect.Type, op op, rows []any, c *rowCount) ([]any, error) {
	switch {
	case c.affected == 0:
		return nil, nil
	case c.affected == int64(c.rows):
		return rows, nil
	case c.affected > int64(c.rows):
		return nil, fmt.Errorf("bunx.%s[%s]: %w: the statement touched %d rows, more than the %d of the model, so the model value "+
			"does not describe them: record their events with Outbox.Record", op, typ, ErrModelNotRows, c.affected, c.rows)
	}
	return nil, fmt.Errorf("bunx.%s[%s]: the statement touched %d of the %d rows of the model, and bunx cannot tell which: "+
		"write these rows one at a time, or record their events with Outbox.Record", op, typ, c.affected, c.rows)
}

func callHandler(ctx context.Context, h handlerFunc, row any, typ reflect.Type, op op) (events []*model.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("bunx.%s[%s]: the handler panicked: %v", op, typ, p)
		}
	}()
	events, err = h(ctx, row)
	if err != nil {
		return nil, fmt.Errorf("bunx.%s[%s]: %w", op, typ, err)
	}
	for i, ev := range events {
		if ev == nil {
			return nil, fmt.Errorf("bunx.%s[%s]: the handler returned a nil event (%d of %d)", op, typ, i+1, len(events))
		}
	}
	return events, nil
}
