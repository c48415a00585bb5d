package model

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"
)

// unconnected is a bun DB that builds queries and never connects.
func unconnected(t *testing.T) *bun.DB {
	t.Helper()
	db := bun.NewDB(sql.OpenDB(pgdriver.NewConnector()), pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestHooksProbeTheColumnList: the hooks change published_at only where bun selects or inserts it as the
// model's column, and keep any other column list as given. It also pins the bun internals the insert
// probe reads (a bun upgrade that moves them fails here, without servers).
func TestHooksProbeTheColumnList(t *testing.T) {
	t.Parallel()
	db := unconnected(t)
	var evs []Event
	for _, c := range []struct {
		name string
		q    *bun.SelectQuery
		want bool
	}{
		{"every column", db.NewSelect().Model(&evs), true},
		{"nil model", db.NewSelect().Model((*Event)(nil)), true},
		{"Column list with it", db.NewSelect().Model(&evs).Column("id", "published_at"), true},
		{"ColumnExpr of the bare name", db.NewSelect().Model(&evs).ColumnExpr("published_at"), false}, // the caller's own
		{"Column list without it", db.NewSelect().Model(&evs).Column("id", "event_id"), false},
		{"excluded", db.NewSelect().Model(&evs).ExcludeColumn("published_at"), false},
		{"all excluded", db.NewSelect().Model(&evs).ExcludeColumn("*"), false},
		{"oe.*", db.NewSelect().Model(&evs).ColumnExpr("oe.*"), false},
	} {
		before := c.q.String()
		if got := selectsPublishedAt(c.q); got != c.want {
			t.Errorf("%s: selectsPublishedAt = %v, want %v", c.name, got, c.want)
		}
		if after := c.q.String(); after != before {
			t.Errorf("%s: the probe changed the query:\n%s\n%s", c.name, before, after)
		}
		if err := (*Event)(nil).BeforeSelect(context.Background(), c.q); err != nil {
			t.Fatal(err)
		}
		after := c.q.String()
		if read := strings.Contains(after, `nullif("oe".published_at, 'infinity') AS published_at`); read != c.want {
			t.Errorf("%s: after BeforeSelect: %s", c.name, after)
		}
		if c.want && strings.Contains(after, `"oe"."published_at"`) {
			t.Errorf("%s: the column is still selected as stored: %s", c.name, after)
		}
		if !c.want && after != before {
			t.Errorf("%s: BeforeSelect changed the query:\n%s\n%s", c.name, before, after)
		}
		if err := (*Event)(nil).BeforeSelect(context.Background(), c.q); err != nil || c.q.String() != after {
			t.Errorf("%s: a second BeforeSelect (the query scanned again) changed it: %v\n%s", c.name, err, c.q.String())
		}
	}

	ev := &Event{}
	for _, c := range []struct {
		name string
		q    *bun.InsertQuery
		want bool
	}{
		{"every column", db.NewInsert().Model(ev), true},
		{"slice", db.NewInsert().Model(&[]Event{{}, {}}), true},
		{"Column list with it", db.NewInsert().Model(ev).Column("event_id", "published_at"), true},
		{"Column list without it", db.NewInsert().Model(ev).Column("event_id"), false},
		{"excluded", db.NewInsert().Model(ev).ExcludeColumn("published_at"), false},
		{"a Value for it", db.NewInsert().Model(ev).Value("published_at", "now()"), false},
	} {
		if got := insertsPublishedAt(c.q); got != c.want {
			t.Errorf("insert, %s: insertsPublishedAt = %v, want %v", c.name, got, c.want)
		}
		if err := (*Event)(nil).BeforeInsert(context.Background(), c.q); err != nil {
			t.Fatal(err)
		}
		s := c.q.String()
		if c.want && strings.Contains(s, `"published_at"`) {
			t.Errorf("insert, %s: published_at is still written and returned: %s", c.name, s)
		}
		if !strings.HasPrefix(s, `INSERT INTO "outbox_events"`) {
			t.Errorf("insert, %s: %s", c.name, s)
		}
	}
}
