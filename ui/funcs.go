package ui

import (
	"html/template"
	"time"
)

// funcs are the helpers the templates use to print durations and times.
var funcs = template.FuncMap{
	"dur": func(d time.Duration) string {
		if d == 0 {
			return "–"
		}
		return d.Round(time.Millisecond).String()
	},
	"ts": func(t any) string {
		switch t := t.(type) {
		case time.Time:
			if t.IsZero() {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		case *time.Time:
			if t == nil || t.IsZero() {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		}
		return "–"
	},
}
