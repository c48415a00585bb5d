package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	bunboxmigrate "github.com/bunbox/bunbox/migrate"
)

// The output forms of `bunbox schema -format`.
const (
	formatSQL           = "sql"
	formatGoose         = "goose"
	formatGolangMigrate = "golang-migrate"
)

// migrationSQL is one of bunbox's migrations: its name (20261129000001_bunbox_outbox_events) and the
// statements of its up and down files, one per --bun:split section.
type migrationSQL struct {
	name     string
	up, down []string
}

// version is the migration's number, the part of its name before the first underscore.
func (m migrationSQL) version() string { v, _, _ := strings.Cut(m.name, "_"); return v }

// readMigrations reads bunbox's migrations in order from the migrate package's files.
func readMigrations() ([]migrationSQL, error) {
	fsys := bunboxmigrate.FS()
	ups, err := fs.Glob(fsys, "*.up.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(ups)
	out := make([]migrationSQL, 0, len(ups))
	for _, up := range ups {
		base := strings.TrimSuffix(strings.TrimSuffix(up, ".up.sql"), ".tx")
		m := migrationSQL{name: base}
		if m.up, err = readStatements(fsys, up); err != nil {
			return nil, err
		}
		down := strings.TrimSuffix(up, ".up.sql") + ".down.sql"
		if m.down, err = readStatements(fsys, down); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// readStatements splits a migration file at bun's --bun:split lines.
func readStatements(fsys fs.FS, name string) ([]string, error) {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	var stmts []string
	for _, s := range strings.Split(string(data), "--bun:split") {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts, nil
}

// since keeps the migrations after the one named (by its full name or its version); "" keeps all.
func since(ms []migrationSQL, name string) ([]migrationSQL, error) {
	if name == "" {
		return ms, nil
	}
	for i, m := range ms {
		if m.name == name || m.version() == name {
			return ms[i+1:], nil
		}
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
	}
	return nil, fmt.Errorf("-since %q is no bunbox migration; they are: %s", name, strings.Join(names, ", "))
}

// dollarQuoted finds PostgreSQL's dollar quoting ($$ or $tag$), which holds semicolons that are not the
// end of a statement (a DO block, a function body).
var dollarQuoted = regexp.MustCompile(`\$[A-Za-z_]*\$`)

// schemaHeader says what a generated file holds and how to use it.
func schemaHeader(ms []migrationSQL, after, tool string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- bunbox schema for %s: migrations of github.com/bunbox/bunbox/migrate", tool)
	if after != "" {
		fmt.Fprintf(&b, " after %s", after)
	}
	b.WriteString(".\n-- Every statement is re-runnable: this file applies over any older bunbox schema, also twice.\n")
	b.WriteString("-- bunbox migrations:")
	if len(ms) == 0 {
		b.WriteString(" none (the schema is up to date)")
	}
	for _, m := range ms {
		b.WriteString(" " + m.name)
	}
	b.WriteString("\n")
	return b.String()
}

// plainSchema is the up migrations as plain SQL, for psql or Atlas.
func plainSchema(ms []migrationSQL, after string) string {
	var b strings.Builder
	b.WriteString(schemaHeader(ms, after, "psql"))
	for _, m := range ms {
		fmt.Fprintf(&b, "\n-- %s\n", m.name)
		for _, s := range m.up {
			b.WriteString(s + "\n\n")
		}
	}
	return b.String()
}

// gooseSchema is one goose SQL migration: the up migrations in order under `-- +goose Up`, their down
// migrations in reverse order under `-- +goose Down`; a statement with dollar quoting is wrapped in
// StatementBegin/StatementEnd, so that goose does not split it at its semicolons.
func gooseSchema(ms []migrationSQL, after string) string {
	var b strings.Builder
	b.WriteString(schemaHeader(ms, after, "goose"))
	stmt := func(s string) {
		if dollarQuoted.MatchString(s) {
			fmt.Fprintf(&b, "-- +goose StatementBegin\n%s\n-- +goose StatementEnd\n\n", s)
			return
		}
		b.WriteString(s + "\n\n")
	}
	b.WriteString("\n-- +goose Up\n")
	for _, m := range ms {
		fmt.Fprintf(&b, "-- %s\n", m.name)
		for _, s := range m.up {
			stmt(s)
		}
	}
	b.WriteString("-- +goose Down\n")
	for i := len(ms) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "-- %s\n", ms[i].name)
		for _, s := range ms[i].down {
			stmt(s)
		}
	}
	return b.String()
}

// golangMigrateSchema is one golang-migrate migration: the up file, and the down file that undoes it
// (the down migrations in reverse order). golang-migrate sends each file as one multi-statement query,
// which PostgreSQL runs in one transaction.
func golangMigrateSchema(ms []migrationSQL, after string) (up, down string) {
	var u, d strings.Builder
	u.WriteString(schemaHeader(ms, after, "golang-migrate (up)"))
	d.WriteString(schemaHeader(ms, after, "golang-migrate (down)"))
	for _, m := range ms {
		fmt.Fprintf(&u, "\n-- %s\n", m.name)
		for _, s := range m.up {
			u.WriteString(s + "\n\n")
		}
	}
	for i := len(ms) - 1; i >= 0; i-- {
		fmt.Fprintf(&d, "\n-- %s\n", ms[i].name)
		for _, s := range ms[i].down {
			d.WriteString(s + "\n\n")
		}
	}
	return u.String(), d.String()
}

// schemaFileVersion is the default version of a written migration file: the time in UTC, as goose and
// golang-migrate name their timestamped files.
func schemaFileVersion() string { return time.Now().UTC().Format("20060102150405") }

func (c *cli) schema(args []string) error {
	fs := flag.NewFlagSet("bunbox schema", flag.ContinueOnError)
	format := fs.String("format", formatSQL, "sql (plain SQL for psql, Atlas), goose (one goose migration) or golang-migrate (an .up.sql and a .down.sql file)")
	after := fs.String("since", "", "only the bunbox migrations after this one (its name or version): the upgrade from a schema that has it")
	dir := fs.String("dir", "", "write the migration file(s) into this directory instead of printing (required for golang-migrate)")
	version := fs.String("version", "", "the version of the written file(s), e.g. 20261201120000 or 000042 (default: the time now in UTC)")
	rest, err := c.flags(fs, args)
	if err != nil {
		return err
	}
	if err := c.noArgs("schema", rest); err != nil {
		return err
	}
	switch *format {
	case formatSQL, formatGoose, formatGolangMigrate:
	default:
		return usageError(c.stderr, "-format %q: want %s, %s or %s", *format, formatSQL, formatGoose, formatGolangMigrate)
	}
	if *format == formatGolangMigrate && *dir == "" {
		return usageError(c.stderr, "-format golang-migrate writes two files: give the directory with -dir")
	}
	if *format == formatSQL && (*dir != "" || *version != "") {
		return usageError(c.stderr, "-dir and -version are for -format goose and golang-migrate; redirect the plain SQL")
	}
	if *version != "" && *dir == "" {
		return usageError(c.stderr, "-version names the written file: give -dir too")
	}
	if *version != "" && strings.Trim(*version, "0123456789") != "" {
		return usageError(c.stderr, "-version %q: want digits only, e.g. 20261201120000", *version)
	}
	all, err := readMigrations()
	if err != nil {
		return err
	}
	ms, err := since(all, *after)
	if err != nil {
		return usageError(c.stderr, "%v", err)
	}
	ms = c.schemaMigrations(ms)
	switch *format {
	case formatGoose:
		text := gooseSchema(ms, *after)
		if *dir == "" {
			_, err = fmt.Fprint(c.stdout, text)
			return err
		}
		return c.writeSchemaFiles(*dir, map[string]string{or(*version, schemaFileVersion()) + "_bunbox.sql": text})
	case formatGolangMigrate:
		up, down := golangMigrateSchema(ms, *after)
		v := or(*version, schemaFileVersion())
		return c.writeSchemaFiles(*dir, map[string]string{v + "_bunbox.up.sql": up, v + "_bunbox.down.sql": down})
	}
	if *after == "" {
		text, err := bunboxmigrate.SchemaSQL(c.migrateOptions()...)
		if err != nil {
			return err
		}
		_, err = fmt.Fprint(c.stdout, text)
		return err
	}
	_, err = fmt.Fprint(c.stdout, plainSchema(ms, *after))
	return err
}

// writeSchemaFiles writes the files into dir, never over a file that exists, and names what it wrote.
func (c *cli) writeSchemaFiles(dir string, files map[string]string) error {
	names := make([]string, 0, len(files))
	for name := range files {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("schema: %s exists: not overwritten (give another -version)", path)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("schema: %w", err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("schema: %w", err)
		}
		_, err = f.WriteString(files[name])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("schema: write %s: %w", path, err)
		}
		fmt.Fprintln(c.stdout, "wrote", path)
	}
	return nil
}
