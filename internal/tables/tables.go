// Package tables names bunbox's tables for one outbox: the unqualified names of today (outbox_events,
// inbox_events, bunbox_leases, resolved through search_path) by default, or the same tables in a schema of
// the user's choice, qualified and quoted ("tenant_a".outbox_events), so that they are found without
// search_path (which a transaction pooler does not keep) and several outboxes live in one database; and,
// with a table prefix, tables whose names start with it (orders_outbox_events), so that several outboxes
// live in one schema. Everything named after a table follows the prefix: its indexes, constraints and id
// sequence, the leases table, the migrations' bookkeeping, the NOTIFY function and channel, the locks.
//
// The SQL of every package is written with today's names; Names.SQL rewrites it for a schema and a
// prefix. For the default Names it returns its argument unchanged, so the default path runs exactly the
// SQL of before.
package tables

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
)

// MaxSchemaLen is the longest schema name accepted, in bytes: the NOTIFY channel "bunbox_outbox:<schema>"
// must fit PostgreSQL's 63-byte identifiers.
const MaxSchemaLen = 48

// MaxPrefixLen is the longest table prefix accepted, in bytes: the longest name bunbox derives from a
// table (outbox_events_unkeyed_pending_idx, 33 bytes) and the prefix must fit PostgreSQL's 63-byte
// identifiers, which leaves room for longer index names of later migrations.
const MaxPrefixLen = 24

// MaxChannelLen is the longest NOTIFY channel, in bytes: PostgreSQL's identifiers (NAMEDATALEN - 1).
const MaxChannelLen = 63

// channelBase is the NOTIFY channel of the default outbox (bunbox_outbox), whose length New checks
// the channel of a schema and a prefix against.
const channelBase = "bunbox_outbox"

// ErrInvalidSchema is wrapped by the error of a schema name that bunbox refuses.
var ErrInvalidSchema = errors.New("invalid schema name")

// ErrInvalidTablePrefix is wrapped by the error of a table prefix that bunbox refuses.
var ErrInvalidTablePrefix = errors.New("invalid table prefix")

// The names that SQL rewrites: the tables of the migrations.
var tableNames = map[string]bool{"outbox_events": true, "inbox_events": true, "bunbox_leases": true, "bunbox_stream": true,
	"bunbox_stream_marks": true, "bunbox_stream_positions": true, "bunbox_stream_positions_0": true,
	"bunbox_stream_positions_1": true}

// keywords may follow DROP INDEX before the index's name.
var keywords = map[string]bool{"IF": true, "EXISTS": true, "CONCURRENTLY": true}

// The names derived from a table, which a prefix precedes too: its indexes, constraints and sequence.
var derivedPrefixes = []string{"outbox_events_", "inbox_events_", "bunbox_leases_", "bunbox_stream_"}

// Names are the names of one outbox's tables. The zero value is the default: today's unqualified names.
type Names struct {
	schema string    // as the user wrote it; "" for the default
	quoted string    // the schema as a quoted identifier
	prefix string    // the table prefix; "" for the default
	cache  *sync.Map // SQL text -> its rewrite
}

// Default returns the default Names: today's unqualified names.
func Default() Names { return Names{} }

// Parse returns the Names of schema, validated: "" is the default; else 1 to MaxSchemaLen bytes of ASCII
// letters, digits and underscores, not starting with a digit. Case is kept ("TenantA" is the schema
// "TenantA", quoted everywhere), so a name means the same in every statement.
func Parse(schema string) (Names, error) {
	if schema == "" {
		return Names{}, nil
	}
	if err := validate(schema); err != nil {
		return Names{}, err
	}
	return Names{schema: schema, quoted: `"` + schema + `"`, cache: new(sync.Map)}, nil
}

// New returns the Names of schema (as Parse) and the table prefix prefix, validated: "" is no prefix;
// else 1 to MaxPrefixLen bytes of lowercase ASCII letters, digits and underscores, not starting with a
// digit or pg_ ("orders_" names the tables orders_outbox_events, orders_inbox_events and
// orders_bunbox_leases). Lowercase only: the names are written unquoted, in statements and in the string
// literals that name constraints, and mean the same in both. The NOTIFY channel of the two,
// bunbox_outbox:<schema>:<prefix>, must fit MaxChannelLen bytes: a longer pair is refused, naming the
// prefix. The error wraps ErrInvalidSchema or ErrInvalidTablePrefix.
func New(schema, prefix string) (Names, error) {
	n, err := Parse(schema)
	if err != nil || prefix == "" {
		return n, err
	}
	if err := validatePrefix(prefix); err != nil {
		return Names{}, err
	}
	n.prefix = prefix
	if n.quoted == "" {
		n.cache = new(sync.Map)
	}
	if c := n.Channel(channelBase); len(c) > MaxChannelLen {
		return Names{}, fmt.Errorf("%w %q: with schema %q the NOTIFY channel %s is %d bytes, over PostgreSQL's %d; "+
			"use a shorter schema or prefix", ErrInvalidTablePrefix, prefix, schema, c, len(c), MaxChannelLen)
	}
	return n, nil
}

func validatePrefix(p string) error {
	if len(p) > MaxPrefixLen {
		return fmt.Errorf("%w %q: longer than %d bytes", ErrInvalidTablePrefix, p, MaxPrefixLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return fmt.Errorf("%w %q: use lowercase ASCII letters, digits and underscores, not starting with a digit", ErrInvalidTablePrefix, p)
		}
	}
	if strings.HasPrefix(p, "pg_") {
		return fmt.Errorf("%w %q: names starting with pg_ are reserved by PostgreSQL", ErrInvalidTablePrefix, p)
	}
	return nil
}

func validate(s string) error {
	if len(s) > MaxSchemaLen {
		return fmt.Errorf("%w %q: longer than %d bytes", ErrInvalidSchema, s, MaxSchemaLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return fmt.Errorf("%w %q: use ASCII letters, digits and underscores, not starting with a digit", ErrInvalidSchema, s)
		}
	}
	if strings.HasPrefix(strings.ToLower(s), "pg_") {
		return fmt.Errorf("%w %q: names starting with pg_ are reserved by PostgreSQL", ErrInvalidSchema, s)
	}
	return nil
}

// IsDefault reports whether n are today's unqualified names: no schema and no prefix.
func (n Names) IsDefault() bool { return n.schema == "" && n.prefix == "" }

// Schema returns the schema as given ("" for the default).
func (n Names) Schema() string { return n.schema }

// Prefix returns the table prefix ("" for the default).
func (n Names) Prefix() string { return n.prefix }

// Name returns name (a table, index, constraint or function of bunbox) with n's prefix, unqualified.
func (n Names) Name(name string) string { return n.prefix + name }

// QuotedSchema returns the schema as a quoted identifier ("" for the default).
func (n Names) QuotedSchema() string { return n.quoted }

// Qualify returns name (a table, index or function of bunbox) with n's prefix, in n's schema: name
// itself by default.
func (n Names) Qualify(name string) string {
	if n.schema == "" {
		return n.prefix + name
	}
	return n.quoted + "." + n.prefix + name
}

// Outbox returns the outbox table as SQL: outbox_events or "schema".outbox_events.
func (n Names) Outbox() string { return n.Qualify("outbox_events") }

// Inbox returns the inbox table as SQL.
func (n Names) Inbox() string { return n.Qualify("inbox_events") }

// Leases returns the leases table as SQL.
func (n Names) Leases() string { return n.Qualify("bunbox_leases") }

// Stream returns the snapshot cursor's table (relay.EnableStream) as SQL.
func (n Names) Stream() string { return n.Qualify("bunbox_stream") }

// Channel returns the NOTIFY channel of the outbox: base, or base + ":" + schema (not a dot, which bun.Ident
// would read as a qualifier), and with a prefix base + ":" + schema + ":" + prefix (the schema possibly
// empty), so two outboxes of one schema have two channels.
func (n Names) Channel(base string) string {
	switch {
	case n.prefix != "":
		return base + ":" + n.schema + ":" + n.prefix
	case n.schema == "":
		return base
	}
	return base + ":" + n.schema
}

// lockID is what the lock keys of n are derived from: the schema, and the prefix after it.
func (n Names) lockID() string {
	if n.prefix == "" {
		return n.schema
	}
	return n.schema + ":" + n.prefix
}

// LockClass returns the first key of the two-key advisory locks of class base for this outbox: base for
// the default, else a value derived from the schema and the prefix, so two outboxes never wait on each other's locks.
func (n Names) LockClass(base int32) int32 {
	if n.IsDefault() {
		return base
	}
	h := fnv.New32a()
	h.Write([]byte(n.lockID()))
	return base ^ int32(h.Sum32()&0x7fffffff)
}

// SQL returns query for n's tables: query itself for the default Names; else every bunbox table name in
// it (outbox_events, inbox_events, bunbox_leases, as whole words) qualified with the quoted schema, and the
// index named after DROP INDEX [IF EXISTS] too (an index is created in its table's schema, but dropped by
// a name that search_path would resolve). With a prefix, every table name and every name derived from
// one (a word starting with outbox_events_, inbox_events_ or bunbox_leases_: indexes, constraints, the id
// sequence, in statements and string literals alike) gets it. Rewrites are cached: use it for constant
// SQL text, and Rewrite for text built at run time.
func (n Names) SQL(query string) string {
	if n.IsDefault() {
		return query
	}
	if v, ok := n.cache.Load(query); ok {
		return v.(string)
	}
	out := n.rewrite(query)
	n.cache.Store(query, out)
	return out
}

// Rewrite is SQL without the cache.
func (n Names) Rewrite(query string) string {
	if n.IsDefault() {
		return query
	}
	return n.rewrite(query)
}

func (n Names) rewrite(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 32)
	for i := 0; i < len(q); {
		if !isIdent(q[i]) {
			b.WriteByte(q[i])
			i++
			continue
		}
		j := i
		for j < len(q) && isIdent(q[j]) {
			j++
		}
		word := q[i:j]
		qualified := i > 0 && q[i-1] == '.' // already qualified, or a column of an alias
		if n.schema != "" && !qualified && (tableNames[word] || !keywords[strings.ToUpper(word)] && afterDropIndex(q[:i])) {
			b.WriteString(n.quoted)
			b.WriteByte('.')
		}
		if n.prefix != "" && !qualified && (tableNames[word] || derived(word)) {
			b.WriteString(n.prefix)
		}
		b.WriteString(word)
		i = j
	}
	return b.String()
}

// derived reports whether word is a name derived from a table's: an index, a constraint, a sequence.
func derived(word string) bool {
	for _, p := range derivedPrefixes {
		if strings.HasPrefix(word, p) {
			return true
		}
	}
	return false
}

func isIdent(c byte) bool {
	return c == '_' || c == '$' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// afterDropIndex reports whether before ends with DROP INDEX, DROP INDEX IF EXISTS or the same with
// CONCURRENTLY, followed by blanks.
func afterDropIndex(before string) bool {
	f := strings.Fields(strings.ToUpper(before[max(0, len(before)-48):]))
	if len(f) == 0 || !strings.HasSuffix(before, " ") && !strings.HasSuffix(before, "\n") && !strings.HasSuffix(before, "\t") {
		return false
	}
	for _, tail := range [][]string{{"DROP", "INDEX"}, {"DROP", "INDEX", "IF", "EXISTS"}, {"DROP", "INDEX", "CONCURRENTLY"}, {"DROP", "INDEX", "CONCURRENTLY", "IF", "EXISTS"}} {
		if len(f) >= len(tail) && equal(f[len(f)-len(tail):], tail) {
			return true
		}
	}
	return false
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
