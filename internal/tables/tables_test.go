package tables

import (
	"errors"
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
	if n.LockClass(7) != 7 || n.LockKey(9) != 9 {
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
