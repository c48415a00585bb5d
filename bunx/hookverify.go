package bunx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/uptrace/bun"
)

// A model type that embeds Hooks but declares its own AfterInsert (or AfterUpdate, AfterDelete) shadows
// Hooks' method by Go's method promotion: bun calls the model's method, and unless that method calls
// bunx.AfterInsert, no event is ever written and nothing says so. Registration therefore verifies, once per
// model type and operation, that the hook method bun will call reaches bunx: OnInsert (OnUpdate, OnDelete)
// calls the method on a new zero value of the model, as bun does, with a query whose database cannot
// connect (any statement the method runs fails), and a context that makes bunx.AfterInsert note that it was
// reached and return at once. A method that does not reach it makes the registration panic, as
// http.HandleFunc does for a pattern it cannot serve: registration is program setup, and a registration
// that can never fire is a bug to fix before the program runs, not an error to handle at each write.

// verified holds the model types and operations whose hook method was seen to reach bunx.
var verified sync.Map // hookKey -> struct{}

type hookKey struct {
	typ reflect.Type
	op  op
}

// probeKey is the context key of a registration's probe of a hook method.
type probeKey struct{}

// probe notes that a hook method called bunx's AfterInsert, AfterUpdate or AfterDelete.
type probe struct{ reached bool }

// errProbe is what bunx's hook returns to a model's method under a probe, which ends the call there.
var errProbe = errors.New("bunx: registration probe of the model's hook method")

// probeReached is the work of bunx's hook on a database no Outbox is bound to: nothing, unless ctx is a
// registration's probe, which it marks as reached.
func probeReached(ctx context.Context) error {
	if p, ok := ctx.Value(probeKey{}).(*probe); ok {
		p.reached = true
		return errProbe
	}
	return nil
}

// verifyHook calls the hook method of *T for op under a probe and returns why it cannot fire, or "" when it
// reached bunx. db gives the dialect of the probe's queries.
func verifyHook[T any](db *bun.DB, op op) string {
	typ := reflect.TypeFor[T]()
	key := hookKey{typ, op}
	if _, ok := verified.Load(key); ok {
		return ""
	}
	sqldb := sql.OpenDB(unreachable{})
	defer sqldb.Close()
	pdb := bun.NewDB(sqldb, db.Dialect())
	p := new(probe)
	ctx := context.WithValue(context.Background(), probeKey{}, p)
	panicked, err := callProbe(ctx, pdb, any(new(T)), op)
	if p.reached {
		verified.Store(key, struct{}{})
		return ""
	}
	name := hookNames[op]
	why := fmt.Sprintf("%s's %s method does not call bunx.%s", typ, name, name)
	if f, ok := typ.FieldByName("Hooks"); ok && f.Anonymous && f.Type == reflect.TypeFor[Hooks]() {
		why = fmt.Sprintf("%s embeds bunx.Hooks, but its own %s method shadows bunx.Hooks.%s (Go's method promotion: "+
			"bun calls the model's method) and does not call bunx.%s", typ, name, name, name)
	}
	switch {
	case panicked != nil:
		why += fmt.Sprintf(" (called on a zero %s to check, it panicked: %v)", typ, panicked)
	case err != nil:
		why += fmt.Sprintf(" (called on a zero %s to check, it returned: %v)", typ, err)
	}
	return why + fmt.Sprintf(": no event would ever be written. End the method with `return bunx.%s(ctx, q)`, "+
		"or remove it and let the embedded bunx.Hooks supply it", name)
}

var hookNames = [...]string{opInsert: "AfterInsert", opUpdate: "AfterUpdate", opDelete: "AfterDelete"}

// callProbe calls the hook method of m for op, as bun does, with a query of pdb on m.
func callProbe(ctx context.Context, pdb *bun.DB, m any, op op) (panicked any, err error) {
	defer func() { panicked = recover() }()
	switch op {
	case opInsert:
		return nil, m.(bun.AfterInsertHook).AfterInsert(ctx, pdb.NewInsert().Model(m))
	case opUpdate:
		return nil, m.(bun.AfterUpdateHook).AfterUpdate(ctx, pdb.NewUpdate().Model(m))
	default:
		return nil, m.(bun.AfterDeleteHook).AfterDelete(ctx, pdb.NewDelete().Model(m))
	}
}

// unreachable is the connector of the probe's database: every connection attempt fails, so a hook method
// under a probe cannot write anything.
type unreachable struct{}

var errUnreachable = errors.New("bunx: the registration probe has no database: a model's hook method runs here only to check that it calls bunx")

func (unreachable) Connect(context.Context) (driver.Conn, error) { return nil, errUnreachable }
func (unreachable) Driver() driver.Driver                        { return unreachableDriver{} }

type unreachableDriver struct{}

func (unreachableDriver) Open(string) (driver.Conn, error) { return nil, errUnreachable }
