package bunx

import (
	"context"
	"database/sql"
	"reflect"
	"runtime"
	"sync"
	"weak"

	"github.com/uptrace/bun"
)

// A model hook only gets the query, so it finds the Outboxes bound to the query's database here, keyed by
// the *sql.DB under the *bun.DB (clones such as db.WithNamedArg share it). The keys are weak pointers:
// an entry goes away with its database, and tests that open their own databases never see each other's.
var bindings sync.Map // weak.Pointer[sql.DB] -> *binding

type binding struct {
	mu   sync.Mutex
	regs []*registry // copy-on-write: a reader takes the slice under mu and then uses it without

	// affected carries the rows affected by a query from the query hook (which sees the result) to the
	// model hook (which does not), keyed by the query.
	affected sync.Map // bun.Query -> *rowCount
	hooked   sync.Map // weak.Pointer[bun.DB] -> struct{}: where rowsHook is installed
}

func bind(db *bun.DB, reg *registry) {
	key := weak.Make(db.DB)
	v, loaded := bindings.LoadOrStore(key, new(binding))
	b := v.(*binding)
	if !loaded {
		runtime.AddCleanup(db.DB, func(k weak.Pointer[sql.DB]) { bindings.Delete(k) }, key)
	}
	b.mu.Lock()
	b.regs = append(b.regs[:len(b.regs):len(b.regs)], reg)
	b.mu.Unlock()
	if _, ok := b.hooked.LoadOrStore(weak.Make(db), struct{}{}); !ok {
		db.AddQueryHook(rowsHook{b})
	}
}

func lookup(db *bun.DB) *binding {
	if db == nil {
		return nil
	}
	v, ok := bindings.Load(weak.Make(db.DB))
	if !ok {
		return nil
	}
	return v.(*binding)
}

func (b *binding) registries() []*registry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.regs
}

// rowsHook records how many rows an INSERT, UPDATE or DELETE on a model with registered handlers was given
// and how many it touched, so that the model hook gives no event for a row that ON CONFLICT DO NOTHING
// skipped or an update that matched nothing. The count of rows is taken before the query runs: bun
// shortens a slice model to the rows that RETURNING gave back.
type rowsHook struct{ b *binding }

type rowCount struct {
	rows     int
	affected int64
	done     bool
}

func (h rowsHook) BeforeQuery(ctx context.Context, ev *bun.QueryEvent) context.Context {
	if ev.Model == nil {
		return ctx
	}
	switch ev.IQuery.(type) {
	case *bun.InsertQuery, *bun.UpdateQuery, *bun.DeleteQuery:
	default:
		return ctx
	}
	typ, val, ok := modelRows(ev.Model.Value())
	if !ok || !h.b.handles(typ) {
		return ctx
	}
	n := 1
	if val.IsValid() && val.Kind() == reflect.Slice {
		n = val.Len()
	}
	h.b.affected.Store(ev.IQuery, &rowCount{rows: n})
	return ctx
}

func (h rowsHook) AfterQuery(_ context.Context, ev *bun.QueryEvent) {
	v, ok := h.b.affected.Load(ev.IQuery)
	if !ok {
		return
	}
	rc := v.(*rowCount)
	if ev.Err != nil || ev.Result == nil {
		h.b.affected.Delete(ev.IQuery)
		return
	}
	n, err := ev.Result.RowsAffected()
	if err != nil {
		h.b.affected.Delete(ev.IQuery)
		return
	}
	rc.affected, rc.done = n, true
}
