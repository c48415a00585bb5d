package main

import (
	"encoding/json"
	"fmt"
	"time"

	bunmigrate "github.com/uptrace/bun/migrate"
)

// printJSON writes v to stdout as indented JSON: what -json prints.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// namesFlag collects the values of a repeatable flag.
type namesFlag []string

func (n *namesFlag) String() string { return "" }

func (n *namesFlag) Set(v string) error {
	*n = append(*n, v)
	return nil
}

// migrationJSON is one migration in `migrate status -json`.
type migrationJSON struct {
	Name      string     `json:"name"`
	Comment   string     `json:"comment,omitempty"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
}

func migrationsJSON(ms bunmigrate.MigrationSlice) []migrationJSON {
	out := make([]migrationJSON, len(ms))
	for i, m := range ms {
		out[i] = migrationJSON{Name: m.Name, Comment: m.Comment, Applied: m.IsApplied()}
		if m.IsApplied() {
			at := m.MigratedAt.UTC()
			out[i].AppliedAt = &at
		}
	}
	return out
}

// plural is "1 <one>" or "n <many>".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
