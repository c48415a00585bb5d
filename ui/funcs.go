package ui

import (
	"html/template"
	"time"
	"unicode/utf8"
)

// shortRunes is how much of a payload, an error or a metadata value the page shows where it shows it
// truncated: in every list, and on an event's page to a reader without the token.
const shortRunes = 120

// funcs are the helpers the templates use to print durations, times and truncated text.
var funcs = template.FuncMap{
	"short": func(s string) string {
		if utf8.RuneCountInString(s) <= shortRunes {
			return s
		}
		return string([]rune(s)[:shortRunes]) + "…"
	},
	"color":        func(class string) string { return seriesColors[class] },
	"hoursChoices": func() []int { return []int{1, 3, 6, 12, 24, historyHoursMax} },
	"secs": func(s float64) string {
		if s == 0 {
			return "–"
		}
		return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
	},
	"add": func(a, b int) int { return a + b },
	"cut": func(s string) bool { return utf8.RuneCountInString(s) > shortRunes },
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
