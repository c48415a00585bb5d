package bunx

import (
	"context"
	"database/sql"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/model"
)

// With WithPreparedStatements, the outbox INSERT runs as a prepared statement where bunx can reach the
// *sql.Tx or *sql.DB under the caller's connection: PostgreSQL then parses and plans it once per connection
// instead of once per transaction, a large part of what the INSERT costs the server (a literal INSERT into
// outbox_events is parsed, rewritten with the defaults of every column and planned each time; see
// BENCHMARKS.md). By default, and elsewhere (a bun.Conn, a query resolver), it is the literal statement of
// insertSQL, run through bun: a transaction pooler cannot mix it up with another client's statement.

const (
	// maxPreparedRows is the most events one prepared INSERT takes; a larger batch is one literal
	// statement, whose parsing is shared by all its rows.
	maxPreparedRows = 8
	// maxPrepared is the most statements one database prepares: one per count of rows, set of optional
	// columns and RETURNING, of which an application uses a few.
	maxPrepared = 64
	// prepareTimeout bounds the preparation, which waits for a free connection of the pool.
	prepareTimeout = 30 * time.Second
	// prepareRetry is how long a statement whose preparation failed (the table is not there yet) goes
	// literal before bunx tries again.
	prepareRetry = 5 * time.Second
)

// stmtKey names one shape of the INSERT.
type stmtKey struct {
	table     string // the outbox table as SQL (tables.Names.Outbox)
	rows      int
	columns   columnSet // the columns it names
	returning bool
}

type stmtEntry struct {
	stmt    *sql.Stmt // nil until prepared
	retryAt time.Time // when a failed preparation may be tried again; zero while one runs
}

// statements are the prepared INSERTs of one *sql.DB. The *sql.DB prepares each on a connection of its
// own when first used, and on each other connection the first time a transaction of it runs it.
//
// A binding (reachable from the process-wide table of bindings) holds its statements by a weak pointer, and
// the query hook that bunx adds to each *bun.DB holds them strongly: a *sql.Stmt holds its *sql.DB, and the
// table must never keep a database alive.
type statements struct {
	db  *sql.DB
	off atomic.Bool // the server lost a prepared statement: write the literal one from then on

	mu sync.RWMutex
	m  map[stmtKey]*stmtEntry
}

func newStatements(db *sql.DB) *statements {
	return &statements{db: db, m: make(map[stmtKey]*stmtEntry)}
}

// get returns the prepared statement of key, or nil when it is not prepared yet: the first call starts
// its preparation in the background (never on the caller's connection or while the caller waits for the
// pool, which the caller's own transaction may have exhausted) and the caller writes the literal statement.
func (s *statements) get(key stmtKey) *sql.Stmt {
	if s.off.Load() {
		return nil
	}
	s.mu.RLock()
	var stmt *sql.Stmt
	if e := s.m[key]; e != nil {
		stmt = e.stmt
	}
	s.mu.RUnlock()
	if stmt != nil {
		return stmt
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	switch {
	case e != nil && e.stmt != nil:
		return e.stmt
	case e != nil && (e.retryAt.IsZero() || now.Before(e.retryAt)):
		return nil // being prepared, or failed a moment ago
	case e == nil && len(s.m) >= maxPrepared:
		return nil
	}
	if e == nil {
		e = new(stmtEntry)
		s.m[key] = e
	}
	e.retryAt = time.Time{}
	query := preparedSQL(key)
	go s.prepare(e, query)
	return nil
}

func (s *statements) prepare(e *stmtEntry, query string) {
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	stmt, err := s.db.PrepareContext(ctx, query)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		e.retryAt = time.Now().Add(prepareRetry)
		return
	}
	e.stmt = stmt
}

// preparedKey returns the shape of the INSERT of events, and false when it is not one to prepare.
func preparedKey(events []*model.Event, returning bool) (stmtKey, bool) {
	if len(events) > maxPreparedRows {
		return stmtKey{}, false
	}
	return stmtKey{rows: len(events), columns: namedColumns(events), returning: returning}, true
}

// preparedSQL is the INSERT of key with $n placeholders, the columns in the order of eventColumns.
func preparedSQL(key stmtKey) string {
	b := []byte("INSERT INTO " + key.table + " (")
	sep := ""
	cols := 0
	for i, c := range eventColumns {
		if key.columns.has(i) {
			b = append(append(b, sep...), c.name...)
			sep = ", "
			cols++
		}
	}
	b = append(b, ") VALUES "...)
	n := 0
	for r := range key.rows {
		if r > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		for c := range cols {
			if c > 0 {
				b = append(b, ", "...)
			}
			n++
			b = append(append(b, '$'), strconv.Itoa(n)...)
		}
		b = append(b, ')')
	}
	if key.returning {
		b = append(b, insertReturning...)
	}
	return string(b)
}

// preparedArgs are the arguments of the prepared INSERT of events, row by row.
func preparedArgs(key stmtKey, events []*model.Event) ([]any, error) {
	args := make([]any, 0, len(events)*len(eventColumns))
	for _, ev := range events {
		for i, c := range eventColumns {
			if !key.columns.has(i) {
				continue
			}
			if c.null(ev) {
				args = append(args, nil)
				continue
			}
			v, err := c.arg(ev)
			if err != nil {
				return nil, columnError(ev, c, err)
			}
			args = append(args, v)
		}
	}
	return args, nil
}

// sqlConn is the database/sql handle under a caller's bun connection, which a prepared statement runs on.
type sqlConn struct {
	tx *sql.Tx // the caller's transaction, or nil outside one
	db *sql.DB // the database of tx, or the one the statement runs on outside a transaction
}

// stmt returns s to run on c: within c's transaction, or s itself outside one.
func (c sqlConn) stmt(ctx context.Context, s *sql.Stmt) *sql.Stmt {
	if c.tx != nil {
		return c.tx.StmtContext(ctx, s)
	}
	return s
}

// idbConn finds the handle under the db that Record is given: a bun.Tx or a *bun.DB.
func idbConn(db bun.IDB) (sqlConn, bool) {
	switch db := db.(type) {
	case bun.Tx:
		if db.Tx != nil {
			return sqlConn{tx: db.Tx, db: db.NewRaw("").DB().DB}, true
		}
	case *bun.Tx:
		if db != nil && db.Tx != nil {
			return sqlConn{tx: db.Tx, db: db.NewRaw("").DB().DB}, true
		}
	case *bun.DB:
		if db != nil {
			return sqlConn{db: db.DB}, true
		}
	}
	return sqlConn{}, false
}

// queryConnField is the index of the connection field in bun's InsertQuery, UpdateQuery and DeleteQuery
// (the unexported baseQuery.conn), found once: bun has no accessor for the connection a model hook's
// query runs on. Where bun's layout differs (another bun version), the index is nil and bunx writes the
// literal statement through the query; TestHookWritesPrepared fails so that the change is seen.
var queryConnField = map[reflect.Type][]int{
	reflect.TypeFor[bun.InsertQuery](): connFieldIndex(reflect.TypeFor[bun.InsertQuery]()),
	reflect.TypeFor[bun.UpdateQuery](): connFieldIndex(reflect.TypeFor[bun.UpdateQuery]()),
	reflect.TypeFor[bun.DeleteQuery](): connFieldIndex(reflect.TypeFor[bun.DeleteQuery]()),
}

func connFieldIndex(t reflect.Type) []int {
	f, ok := t.FieldByName("conn")
	if !ok || f.Type != reflect.TypeFor[bun.IConn]() {
		return nil
	}
	return f.Index
}

// queryConn finds the handle a model hook's query ran on: the *sql.Tx of tx.NewInsert() and the like, or
// the *sql.DB of db.NewInsert().
func queryConn(q hookQuery) (sqlConn, bool) {
	v := reflect.ValueOf(q)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return sqlConn{}, false
	}
	idx := queryConnField[v.Type().Elem()]
	if idx == nil {
		return sqlConn{}, false
	}
	f := v.Elem().FieldByIndex(idx)
	switch c := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(type) {
	case *sql.Tx:
		return sqlConn{tx: c, db: q.DB().DB}, c != nil
	case *sql.DB:
		return sqlConn{db: c}, c != nil
	}
	return sqlConn{}, false
}
