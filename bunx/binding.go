package bunx

import (
	"context"
	"database/sql"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
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

	// affected carries the rows affected by a query that touched fewer rows than it was given from the
	// query hook (which sees the result) to the model hook (which does not), keyed by a weak pointer to
	// the query. The model hook takes the entry out; should it never run (a model whose own AfterUpdate
	// does not call bunx.AfterUpdate), the entry goes with the query when the garbage collector frees it,
	// so nothing outlives its query.
	affected sync.Map     // weak.Pointer[bun.InsertQuery|UpdateQuery|DeleteQuery] -> *rowCount
	pending  atomic.Int64 // entries in affected: while there are none, a model hook looks none up

	// hooked holds the *bun.DBs known to carry rowsHook: those bind installed it on, and the clones made
	// after that (db.WithNamedArg copies the hooks), which rowsHook notes as it sees their queries, before
	// their model hooks run. A model hook refuses a query of a *bun.DB not in it (a clone made before
	// bunx.New shares the *sql.DB, so the binding, but not the query hook): bunx could not count its rows.
	hooked sync.Map // weak.Pointer[bun.DB] -> struct{}; an entry goes with its bun.DB

	// stmts are the prepared INSERTs of the database. The rowsHook of each *bun.DB holds them: this weak
	// pointer must not keep the *sql.DB (which each *sql.Stmt holds) alive from the table of bindings.
	stmts weak.Pointer[statements]
}

// bind binds reg to db and returns the database's prepared statements.
func bind(db *bun.DB, reg *registry) *statements {
	key := weak.Make(db.DB)
	v, loaded := bindings.LoadOrStore(key, new(binding))
	b := v.(*binding)
	if !loaded {
		runtime.AddCleanup(db.DB, func(k weak.Pointer[sql.DB]) { bindings.Delete(k) }, key)
	}
	b.mu.Lock()
	b.regs = append(b.regs[:len(b.regs):len(b.regs)], reg)
	stmts := b.stmts.Value()
	if stmts == nil {
		stmts = newStatements(db.DB)
		b.stmts = weak.Make(stmts)
	}
	b.mu.Unlock()
	if b.noteHooked(db) {
		db.AddQueryHook(rowsHook{b, stmts}) //nolint:staticcheck // the hook must reach the caller's *bun.DB itself; WithQueryHook returns a copy
	}
	return stmts
}

// noteHooked notes that db carries rowsHook, and reports whether it was not known to.
func (b *binding) noteHooked(db *bun.DB) bool {
	key := weak.Make(db)
	if _, ok := b.hooked.Load(key); ok {
		return false
	}
	if _, loaded := b.hooked.LoadOrStore(key, struct{}{}); loaded {
		return false
	}
	runtime.AddCleanup(db, func(k weak.Pointer[bun.DB]) { b.hooked.Delete(k) }, key)
	return true
}

// isHooked reports whether db is known to carry rowsHook.
func (b *binding) isHooked(db *bun.DB) bool {
	_, ok := b.hooked.Load(weak.Make(db))
	return ok
}

// statements returns the prepared INSERTs of the database, or nil when no *bun.DB with bunx's query hook
// is left to hold them.
func (b *binding) statements() *statements {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stmts.Value()
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

// rowsHook tells the model hook of an INSERT, UPDATE or DELETE on a model with handlers registered for
// that operation when the statement touched fewer rows than it was given, so that the model hook gives no
// event for a row that ON CONFLICT DO NOTHING (or a trigger) skipped or an update that matched nothing, or
// more (a WHERE that matched rows the model does not hold), which the model hook refuses.
//
// It costs the common case, every row touched, next to nothing: AfterQuery stores an entry in
// binding.affected only when a statement fell short, and the model hook looks one up only while an entry
// exists (binding.pending); no entry means every row was touched. The count of rows given is taken before
// a slice model's query runs, as bun shortens the slice to the rows that RETURNING gave back; a single
// model has one row.
type rowsHook struct {
	b     *binding
	stmts *statements // held here, not by b: see binding.stmts
}

type rowCount struct {
	rows     int
	affected int64
	cleanup  runtime.Cleanup // deletes the entry when the query is freed; stopped when the entry is taken
}

// queryOp tells the operation of a query.
func queryOp(q bun.Query) (op, bool) {
	switch q.(type) {
	case *bun.InsertQuery:
		return opInsert, true
	case *bun.UpdateQuery:
		return opUpdate, true
	case *bun.DeleteQuery:
		return opDelete, true
	}
	return 0, false
}

// queryKey is the key of a query's entry in binding.affected: a weak pointer, which neither keeps the
// query alive nor changes while it lives. q is one of the queries queryOp knows.
func queryKey(q bun.Query) any {
	switch q := q.(type) {
	case *bun.InsertQuery:
		return weak.Make(q)
	case *bun.UpdateQuery:
		return weak.Make(q)
	case *bun.DeleteQuery:
		return weak.Make(q)
	}
	return nil
}

// stashKey is the key in the QueryEvent's Stash of the number of rows a slice model had before its query.
type stashKey struct{}

func (h rowsHook) BeforeQuery(ctx context.Context, ev *bun.QueryEvent) context.Context {
	if ev.Model == nil {
		return ctx
	}
	op, ok := queryOp(ev.IQuery)
	if !ok {
		return ctx
	}
	typ, val, ok := modelRows(ev.Model.Value())
	if !ok || val.Kind() != reflect.Slice || !h.b.handles(typ, op) {
		return ctx // a single model has one row
	}
	if ev.Stash == nil {
		ev.Stash = make(map[any]any, 1)
	}
	ev.Stash[stashKey{}] = val.Len()
	return ctx
}

func (h rowsHook) AfterQuery(_ context.Context, ev *bun.QueryEvent) {
	if ev.Model == nil || ev.Err != nil || ev.Result == nil {
		return // after an error bun runs no model hook
	}
	op, ok := queryOp(ev.IQuery)
	if !ok {
		return
	}
	if ev.DB != nil {
		h.b.noteHooked(ev.DB) // a clone made after bunx.New: its model hook may trust the count
	}
	rows := 1
	if n, ok := ev.Stash[stashKey{}].(int); ok {
		rows = n
	}
	affected, err := ev.Result.RowsAffected()
	if err != nil || affected == int64(rows) {
		return // every row touched: the model hook needs no entry
	}
	typ, _, ok := modelRows(ev.Model.Value())
	if !ok || !h.b.handles(typ, op) {
		return // only a model hook that records events takes the entry out: store none for the others
	}
	key := queryKey(ev.IQuery)
	rc := &rowCount{rows: rows, affected: affected}
	b := h.b
	switch q := ev.IQuery.(type) {
	case *bun.InsertQuery:
		rc.cleanup = runtime.AddCleanup(q, b.forget, key)
	case *bun.UpdateQuery:
		rc.cleanup = runtime.AddCleanup(q, b.forget, key)
	case *bun.DeleteQuery:
		rc.cleanup = runtime.AddCleanup(q, b.forget, key)
	}
	b.pending.Add(1)
	if old, loaded := b.affected.Swap(key, rc); loaded {
		// The same query ran again before a model hook took its entry (a model whose own hook did not
		// call bunx's): the new count replaces it.
		old.(*rowCount).cleanup.Stop()
		b.pending.Add(-1)
	}
}

// take removes and returns the row count of query q, if a statement of it did not touch exactly its rows.
func (b *binding) take(q bun.Query) *rowCount {
	if b.pending.Load() == 0 {
		return nil
	}
	v, ok := b.affected.LoadAndDelete(queryKey(q))
	if !ok {
		return nil
	}
	b.pending.Add(-1)
	rc := v.(*rowCount)
	rc.cleanup.Stop()
	return rc
}

// forget is the cleanup of a query whose entry no model hook took.
func (b *binding) forget(key any) {
	if _, ok := b.affected.LoadAndDelete(key); ok {
		b.pending.Add(-1)
	}
}
