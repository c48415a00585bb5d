package connect

import (
	"net/url"
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
	// White space around the string (an environment variable written with a trailing newline, a
	// copied URL with a leading space) is kept, and does not hide the scheme: Postgres and Redis
	// trim it before they parse.
	body := strings.TrimLeftFunc(s, unicode.IsSpace)
	lead := s[:len(s)-len(body)]
	if i := schemeEnd(body); i > 0 {
		return lead + redactParams(body[:i]+redactUserinfo(body[i:], loneUserIsName(body[:i-3])), true)
	}
	if at := strings.LastIndexByte(body, '@'); at > 0 && !startsPair(body, 0) {
		// Not opening as libpq's key=value (name, then '='): a URL without its scheme, whatever its
		// userinfo holds ('=' and white space included), unless libpq's parser reads it as pairs.
		if _, err := keyValuePairs(body); err == nil {
			// libpq's form to the parser (a first key such as "u:x" or "//u"), a URL without its scheme
			// to the eye: a password may be in either place, and may run across the '@'. All is masked.
			rest := strings.TrimRightFunc(body, unicode.IsSpace)
			return lead + mask + body[len(rest):]
		}
		// A URL without its scheme: user:password@host, //user@host.
		return lead + redactParams(redactUserinfo(body, false), true)
	}
	return lead + redactParams(body, false)
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

// redactUserinfo masks the password of the userinfo in rest, the part of a URL after "://". The userinfo
// ends at the last '@', since a password may hold unescaped '@', '/', '?' or '#' (url.Parse rejects
// such a URL, or worse, reads part of the password as a port and the rest as a path), and the user name
// at the first ':'. A userinfo without ':' is kept when loneIsName (a PostgreSQL user name), and masked
// otherwise (a Redis password written as redis://SECRET@host).
func redactUserinfo(rest string, loneIsName bool) string {
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return rest
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	// An '@' before the first ':' may end a userinfo without ':' (url.Parse ends the authority at '/', '?'
	// or '#', so redis://SECRET@h:1#x@y holds the lone SECRET): outside PostgreSQL it is masked whole too.
	if !hasPassword || !loneIsName && strings.ContainsRune(user, '@') {
		if loneIsName || at == 0 {
			return rest
		}
		return mask + rest[at:]
	}
	return user + ":" + mask + rest[at:]
}

// redactParams masks the value of every parameter whose name contains "pass". In a URL (inURL) a value
// ends at '&' or '#'; in key=value form at white space, and a value in single quotes at the closing
// quote, with backslash escapes as libpq reads them.
func redactParams(s string, inURL bool) string {
	var b strings.Builder
	i := 0
	for i < len(s) {
		valStart, ok := nextPassKey(s, i, inURL)
		if !ok {
			b.WriteString(s[i:])
			break
		}
		valEnd := valueEnd(s, valStart, inURL)
		b.WriteString(s[i:valStart])
		b.WriteString(mask)
		i = valEnd
	}
	return b.String()
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
		case inURL && (c == '&' || c == '#'):
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
