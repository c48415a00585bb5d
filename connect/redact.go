package connect

import (
	"net/url"
	"slices"
	"strings"
	"unicode"
)

// mask is what Redact writes in place of a password.
const mask = "xxxxx"

// Redact returns the connection string s with every password replaced by "xxxxx", whatever its form:
//
//   - URL userinfo: postgres://user:secret@host/db, redis://:secret@host, rediss://user:secret@host,
//     redis-sentinel://:secret@h1,h2?master=m, redis-cluster://:secret@h1:7000,h2:7001
//   - a userinfo without ':' in any URL but postgres:// and postgresql:// (where it is the user name):
//     redis://secret@host, which Redis's own client reads as the password, becomes redis://xxxxx@host
//   - parameters whose name contains "pass" (password, sslpassword, sentinel_password...), in a URL's
//     query (?password=secret&sslmode=require) or in libpq's key=value form (password=secret,
//     password='se cret', with \' and \\ escapes)
//   - a URL without its scheme (user:secret@host:port, //secret@host); a string with an '@' that libpq
//     would read as key=value pairs but that does not open with name= (u:x=1 password=p@ss) is masked whole
//   - input that url.Parse rejects (postgres://u:Pa%ZZsecret1@h/db) or that has unescaped @, /, ? or #
//     in the password: everything between "://" and the last "@" but the user name is masked.
//
// White space around s is kept and does not change what is masked. Redact never fails and never returns its input's password: when it cannot tell where a password ends,
// it masks more, not less (a URL with an '@' in its path or query loses what lies before that '@'). It
// takes one connection string (a URL, possibly with several comma-separated hosts, or a key=value list),
// not free text.
func Redact(s string) string {
	var b strings.Builder
	i := 0
	for _, sp := range secretSpans(s) {
		b.WriteString(s[i:sp.start])
		b.WriteString(mask)
		i = sp.end
	}
	b.WriteString(s[i:])
	return b.String()
}

// span is a password's place in a connection string: s[start:end], possibly empty (a password
// parameter with no value, still shown as masked).
type span struct{ start, end int }

// secretSpans returns where the passwords are in the connection string s, as Redact masks them: in
// order, not overlapping.
func secretSpans(s string) []span {
	// White space around the string (an environment variable written with a trailing newline, a
	// copied URL with a leading space) is kept, and does not hide the scheme: Postgres and Redis
	// trim it before they parse.
	body := strings.TrimLeftFunc(s, unicode.IsSpace)
	off := len(s) - len(body)
	if i := schemeEnd(body); i > 0 {
		return withParams(s, shift(userinfoSpan(body[i:], loneUserIsName(body[:i-3])), off+i))
	}
	if at := strings.LastIndexByte(body, '@'); at > 0 && !startsPair(body, 0) {
		// Not opening as libpq's key=value (name, then '='): a URL without its scheme, whatever its
		// userinfo holds ('=' and white space included), unless libpq's parser reads it as pairs.
		if _, err := keyValuePairs(body); err == nil {
			// libpq's form to the parser (a first key such as "u:x" or "//u"), a URL without its scheme
			// to the eye: a password may be in either place, and may run across the '@'. All is masked.
			return []span{{off, off + len(strings.TrimRightFunc(body, unicode.IsSpace))}}
		}
		// A URL without its scheme: user:password@host, //user@host.
		return withParams(s, shift(userinfoSpan(body, false), off))
	}
	return paramSpans(s, 0, false)
}

// withParams adds to the userinfo's span (none or one) in the URL s the spans of its password
// parameters, read both with the userinfo masked and as it is: the last '@' may end a password with an
// unescaped '@' or lie in a query's password (postgres://u@h/db?password=p@ss, which url.Parse reads
// so), and either reading's secret is masked.
func withParams(s string, user []span) []span {
	filled := s
	for _, sp := range user {
		filled = s[:sp.start] + strings.Repeat("x", sp.end-sp.start) + s[sp.end:]
	}
	all := append(user, paramSpans(filled, 0, true)...)
	all = append(all, paramSpans(s, 0, true)...)
	slices.SortFunc(all, func(a, b span) int { return a.start - b.start })
	var out []span
	for _, sp := range all {
		// A parameter whose value runs over the masked userinfo (scheme://pass=x:SECRET@h) joins it.
		if n := len(out); n > 0 && sp.start < out[n-1].end {
			out[n-1].end = max(out[n-1].end, sp.end)
			continue
		}
		out = append(out, sp)
	}
	return out
}

func shift(sp []span, by int) []span {
	for i := range sp {
		sp[i].start += by
		sp[i].end += by
	}
	return sp
}

// loneUserIsName reports whether, in a URL of scheme, a userinfo without ':' (scheme://NAME@host) is
// a user name: only in postgres:// and postgresql:// URLs, as libpq reads them. Elsewhere it is masked:
// Redis's own client (redis-cli) reads redis://SECRET@host as the password.
func loneUserIsName(scheme string) bool {
	scheme = strings.ToLower(scheme)
	return scheme == "postgres" || scheme == "postgresql"
}

// schemeEnd returns the index just after the "scheme://" that s starts with, or 0.
func schemeEnd(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && strings.HasPrefix(s[i:], "://"):
			return i + 3
		default:
			return 0
		}
	}
	return 0
}

// userinfoSpan returns where the password of the userinfo in rest, the part of a URL after "://", is.
// The userinfo ends at the last '@', since a password may hold unescaped '@', '/', '?' or '#' (url.Parse
// rejects such a URL, or worse, reads part of the password as a port and the rest as a path), and the
// user name at the first ':'. A userinfo without ':' is a user name when loneIsName (PostgreSQL's), and a
// password otherwise (Redis's own client reads redis://SECRET@host so).
func userinfoSpan(rest string, loneIsName bool) []span {
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return nil
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	// An '@' before the first ':' may end a userinfo without ':' (url.Parse ends the authority at '/', '?'
	// or '#', so redis://SECRET@h:1#x@y holds the lone SECRET): outside PostgreSQL it is masked whole too.
	if !hasPassword || !loneIsName && strings.ContainsRune(user, '@') {
		if loneIsName || at == 0 {
			return nil
		}
		return []span{{0, at}}
	}
	return []span{{len(user) + 1, at}}
}

// paramSpans returns, from i on, the values of every parameter whose name contains "pass". In a URL
// (inURL) a value ends at '&' (not at '#': a password's unescaped '#' would start a fragment that holds
// the rest of it); in key=value form at white space, and a value in single quotes at
// the closing quote, with backslash escapes as libpq reads them.
func paramSpans(s string, i int, inURL bool) []span {
	var out []span
	for i < len(s) {
		valStart, ok := nextPassKey(s, i, inURL)
		if !ok {
			break
		}
		i = valueEnd(s, valStart, inURL)
		out = append(out, span{valStart, i})
	}
	return out
}

// nextPassKey finds, from i on, the next "name=" whose name contains "pass" (case-insensitive, and
// percent-decoded in a URL), and returns where its value starts.
func nextPassKey(s string, i int, inURL bool) (valStart int, ok bool) {
	for i < len(s) {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return 0, false
		}
		eq += i
		// The name runs back from '=' over spaces (key = value is allowed) and name characters.
		j := eq
		for j > 0 && !inURL && isSpace(s[j-1]) {
			j--
		}
		k := j
		for k > 0 && isNameByte(s[k-1], inURL) {
			k--
		}
		name := s[k:j]
		if inURL {
			if d, err := url.QueryUnescape(name); err == nil {
				name = d
			}
		}
		v := eq + 1
		for !inURL && v < len(s) && isSpace(s[v]) {
			v++
		}
		if strings.Contains(strings.ToLower(name), "pass") {
			return v, true
		}
		i = eq + 1
	}
	return 0, false
}

func isNameByte(c byte, inURL bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		return true
	case inURL && (c == '%' || c == '+'):
		return true
	}
	return false
}

// valueEnd returns where the value starting at i ends.
func valueEnd(s string, i int, inURL bool) int {
	if i < len(s) && s[i] == '\'' {
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '\'':
				return j + 1
			}
		}
		return len(s) // an unclosed quote: the rest is the value
	}
	for j := i; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '\\' && !inURL:
			j++
		case inURL && c == '&':
			return j
		case !inURL && isSpace(c) && startsPair(s, j):
			return j
		}
	}
	return len(s)
}

// startsPair reports whether what follows the white space at i in a key=value string is a key= or its
// end. A word without '=' after an unquoted password is the rest of a password with a space that the
// user did not quote (libpq refuses such a string): it is masked with it.
func startsPair(s string, i int) bool {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	k := i
	for i < len(s) && isNameByte(s[i], false) {
		i++
	}
	name := i > k
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i == len(s) || name && s[i] == '='
}

// isSpace is C's isspace, which libpq uses to separate key=value pairs.
func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}
