package tables

import (
	"errors"
	"strings"
	"testing"
)

func TestDefaultLeavesSQLAlone(t *testing.T) {
	q := "DROP INDEX IF EXISTS outbox_events_pending_idx; SELECT 1 FROM outbox_events, inbox_events, bunbox_leases"
	if got := Default().SQL(q); got != q {
		t.Fatalf("default rewrote %q to %q", q, got)
	}
	n, err := Parse("")
	if err != nil || !n.IsDefault() || n.Outbox() != "outbox_events" || n.Channel("bunbox_outbox") != "bunbox_outbox" {
		t.Fatalf("Parse(\"\") = %+v, %v", n, err)
	}
	if n.LockClass(7) != 7 {
		t.Fatal("default lock keys changed")
	}
}

func TestSchemaRewrite(t *testing.T) {
	n, err := Parse("Tenant_A")
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"SELECT o.id FROM outbox_events AS o WHERE o.outbox_events_x = 1":            `SELECT o.id FROM "Tenant_A".outbox_events AS o WHERE o.outbox_events_x = 1`,
		"CREATE INDEX IF NOT EXISTS outbox_events_pending_idx ON outbox_events (id)": `CREATE INDEX IF NOT EXISTS outbox_events_pending_idx ON "Tenant_A".outbox_events (id)`,
		"DROP INDEX IF EXISTS outbox_events_pending_idx;":                            `DROP INDEX IF EXISTS "Tenant_A".outbox_events_pending_idx;`,
		"drop index\n  outbox_events_x":                                              `drop index` + "\n  " + `"Tenant_A".outbox_events_x`,
		"WHERE conrelid = 'outbox_events'::regclass AND conname = 'outbox_events_c'": `WHERE conrelid = '"Tenant_A".outbox_events'::regclass AND conname = 'outbox_events_c'`,
		"INSERT INTO inbox_events; DELETE FROM bunbox_leases":                        `INSERT INTO "Tenant_A".inbox_events; DELETE FROM "Tenant_A".bunbox_leases`,
		"SELECT outbox_events_count FROM my_outbox_events":                           "SELECT outbox_events_count FROM my_outbox_events",
	} {
		if got := n.SQL(in); got != want {
			t.Errorf("SQL(%q)\n got %q\nwant %q", in, got, want)
		}
		if got := n.SQL(in); got != want { // from the cache
			t.Errorf("cached SQL(%q) = %q", in, got)
		}
	}
	if n.Channel("bunbox_outbox") != "bunbox_outbox:Tenant_A" {
		t.Errorf("Channel = %q", n.Channel("bunbox_outbox"))
	}
	m, _ := Parse("tenant_b")
	if n.LockClass(1) == m.LockClass(1) || n.LockClass(1) == 1 {
		t.Error("lock classes of two schemas collide")
	}
}

func TestParseRefuses(t *testing.T) {
	for _, s := range []string{`a"b`, "a'b", "a b", "1abc", "a.b", "a;DROP TABLE x", "pg_temp", "ä", string(make([]byte, MaxSchemaLen+1))} {
		if _, err := Parse(s); !errors.Is(err, ErrInvalidSchema) {
			t.Errorf("Parse(%q) = %v, want ErrInvalidSchema", s, err)
		}
	}
	_, err := Parse(`a"b`)
	if err == nil || err.Error() != `invalid schema name "a\"b": use ASCII letters, digits and underscores, not starting with a digit` {
		t.Errorf("error = %v", err)
	}
}

func TestPrefixRewrite(t *testing.T) {
	for _, tc := range []struct {
		schema, in, want string
	}{
		{"", "SELECT o.id FROM outbox_events AS o WHERE o.outbox_events_x = 1", "SELECT o.id FROM orders_outbox_events AS o WHERE o.outbox_events_x = 1"},
		{"", "CREATE INDEX IF NOT EXISTS outbox_events_pending_idx ON outbox_events (id)", "CREATE INDEX IF NOT EXISTS orders_outbox_events_pending_idx ON orders_outbox_events (id)"},
		{"", "DROP INDEX IF EXISTS outbox_events_pending_idx;", "DROP INDEX IF EXISTS orders_outbox_events_pending_idx;"},
		{"T", "DROP INDEX IF EXISTS outbox_events_pending_idx;", `DROP INDEX IF EXISTS "T".orders_outbox_events_pending_idx;`},
		{"T", "WHERE conrelid = 'outbox_events'::regclass AND conname = 'outbox_events_c'", `WHERE conrelid = '"T".orders_outbox_events'::regclass AND conname = 'orders_outbox_events_c'`},
		{"T", "SELECT pg_get_serial_sequence('outbox_events', 'id')", `SELECT pg_get_serial_sequence('"T".orders_outbox_events', 'id')`},
		{"T", "INSERT INTO inbox_events; DELETE FROM bunbox_leases", `INSERT INTO "T".orders_inbox_events; DELETE FROM "T".orders_bunbox_leases`},
		{"", "CREATE INDEX inbox_events_handled_at_idx ON inbox_events (handled_at)", "CREATE INDEX orders_inbox_events_handled_at_idx ON orders_inbox_events (handled_at)"},
		{"", "SELECT my_outbox_events, outbox_eventsx FROM t", "SELECT my_outbox_events, outbox_eventsx FROM t"},
	} {
		n, err := New(tc.schema, "orders_")
		if err != nil {
			t.Fatal(err)
		}
		if got := n.SQL(tc.in); got != tc.want {
			t.Errorf("schema %q: SQL(%q)\n got %q\nwant %q", tc.schema, tc.in, got, tc.want)
		}
	}
	n, _ := New("", "orders_")
	if n.IsDefault() || n.Outbox() != "orders_outbox_events" || n.Qualify("bunbox_migrations") != "orders_bunbox_migrations" || n.Name("outbox_events_event_id_key") != "orders_outbox_events_event_id_key" {
		t.Errorf("names of the prefix: %q %q", n.Outbox(), n.Qualify("bunbox_migrations"))
	}
	m, _ := New("T", "orders_")
	if m.Leases() != `"T".orders_bunbox_leases` || m.Inbox() != `"T".orders_inbox_events` {
		t.Errorf("names of schema and prefix: %q %q", m.Leases(), m.Inbox())
	}
	// Two outboxes of one schema: their own channel, their own locks.
	o, _ := New("T", "billing_")
	s, _ := Parse("T")
	channels := map[string]bool{n.Channel("bunbox_outbox"): true, m.Channel("bunbox_outbox"): true, o.Channel("bunbox_outbox"): true, s.Channel("bunbox_outbox"): true}
	if len(channels) != 4 || m.Channel("bunbox_outbox") != "bunbox_outbox:T:orders_" || n.Channel("bunbox_outbox") != "bunbox_outbox::orders_" {
		t.Errorf("channels %v", channels)
	}
	classes := map[int32]bool{n.LockClass(1): true, m.LockClass(1): true, o.LockClass(1): true, s.LockClass(1): true, Default().LockClass(1): true}
	if len(classes) != 5 {
		t.Errorf("lock classes collide: %v", classes)
	}
}

// Every name the migrations derive from a table, with the longest prefix, fits PostgreSQL's identifiers.
func TestLongestPrefixFits(t *testing.T) {
	p := strings.Repeat("p", MaxPrefixLen)
	n, err := New("", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"outbox_events_unkeyed_pending_idx", "outbox_events_retention_ns_check", "bunbox_migration_locks", "bunbox_outbox_notify"} {
		if got := n.Name(name); len(got) > 63 {
			t.Errorf("%s is %d bytes", got, len(got))
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for _, p := range []string{"Orders_", `a"b`, "a b", "1abc", "a.b", "pg_x", "ä", strings.Repeat("p", MaxPrefixLen+1)} {
		_, err := New("", p)
		if !errors.Is(err, ErrInvalidTablePrefix) {
			t.Errorf("New(%q) = %v, want ErrInvalidTablePrefix", p, err)
		}
	}
	if _, err := New("a b", "ok_"); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("New with a bad schema = %v", err)
	}
	// Each fits alone; together the channel would not.
	long := strings.Repeat("s", MaxSchemaLen)
	_, err := New(long, "orders_")
	if !errors.Is(err, ErrInvalidTablePrefix) || !strings.Contains(err.Error(), "over PostgreSQL's 63") {
		t.Errorf("New(long schema, prefix) = %v", err)
	}
	_, err = New("", "Orders_")
	if err == nil || err.Error() != `invalid table prefix "Orders_": use lowercase ASCII letters, digits and underscores, not starting with a digit` {
		t.Errorf("error = %v", err)
	}
}
