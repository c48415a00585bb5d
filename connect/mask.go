package connect

import (
	"errors"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// minPiece is how long a run of an error's text must be to be masked when it matches a password's bytes
// in the connection string: with some of the string around the password (a host after the '@'), or a
// piece of the password alone that ends where a driver may split it. Shorter pieces of a password are
// masked only where the text shows them as a word (a password of two or three bytes, alone).
const minPiece = 4

// maskError is err with every piece of a password of dsn masked in its text, however a driver read dsn.
// A driver that splits a URL otherwise than Redact does (pgx ends the userinfo at the first '@', so
// postgres://u:p@ssSECRET@h/db is host "ssSECRET@h" to it) shows a piece of the password where it shows
// a host, a user or a database name; so this masks, in the text, whatever matches dsn, raw or
// percent-decoded, over a password's bytes, and each password whole. The error returned unwraps to
// err's when nothing was masked; otherwise only to a *pgconn.PgError in err (the server's word, such
// as 28P01), if its own text holds no password.
func maskError(dsn string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	masked := maskIn(dsn, msg)
	if masked == msg {
		return err
	}
	e := &maskedError{msg: masked}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && maskIn(dsn, pe.Error()) == pe.Error() {
		e.err = pe
	}
	return e
}

type maskedError struct {
	msg string
	err error
}

func (e *maskedError) Error() string { return e.msg }
func (e *maskedError) Unwrap() error { return e.err }

// secretText is a text to find in an error: the connection string (raw or decoded) with its passwords'
// bytes marked, or a password alone.
type secretText struct {
	s      string
	secret []bool
}

// piece returns how much of the n bytes at text[i:] that match t.s[j:] is a piece of a password to mask,
// or 0: all n when they hold a password's bytes and some of the string around it (minPiece at least);
// else the longest part that is all a password's, from and to where a driver may split it (the ends of
// the password, or a delimiter such as '@' in it), minPiece long or a word of the text.
func (t secretText) piece(text string, i, j, n int) int {
	secret := t.secret[j : j+n]
	if !slices.Contains(secret, true) {
		return 0
	}
	if slices.Contains(secret, false) {
		if n >= minPiece {
			return n
		}
		return 0
	}
	if !t.split(j) {
		return 0
	}
	for m := n; m >= 2; m-- {
		if t.split(j+m) && (m >= minPiece || !isWordByte(text, i-1) && !isWordByte(text, i+m)) {
			return m
		}
	}
	return 0
}

// split reports whether a driver may split t.s at k within a password.
func (t secretText) split(k int) bool {
	return k == 0 || k == len(t.s) || t.secret[k-1] != t.secret[k] || isDelimiter(t.s[k-1]) || isDelimiter(t.s[k])
}

func isDelimiter(c byte) bool { return strings.IndexByte("@:/?#&=,; \t'\"", c) >= 0 }

func isWordByte(s string, i int) bool {
	if i < 0 || i >= len(s) {
		return false
	}
	c := s[i]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// maskIn masks in text every piece of a password of dsn (see maskError).
func maskIn(dsn, text string) string {
	hide := make([]bool, len(text))
	found := false
	for _, src := range secretTexts(dsn) {
		for i := range len(text) {
			for j := range len(src.s) {
				n := 0
				for i+n < len(text) && j+n < len(src.s) && text[i+n] == src.s[j+n] {
					n++
				}
				if n = src.piece(text, i, j, n); n == 0 {
					continue
				}
				for k, sec := range src.secret[j : j+n] {
					if sec {
						hide[i+k], found = true, true
					}
				}
			}
		}
	}
	if !found {
		return text
	}
	// A rune the password shares in part with the text is masked whole.
	for i := 0; i < len(text); {
		_, size := utf8.DecodeRuneInString(text[i:])
		if slices.Contains(hide[i:i+size], true) {
			for k := i; k < i+size; k++ {
				hide[k] = true
			}
		}
		i += size
	}
	var b strings.Builder
	for i := range len(text) {
		switch {
		case !hide[i]:
			b.WriteByte(text[i])
		case i == 0 || !hide[i-1]:
			b.WriteString(mask)
		}
	}
	return b.String()
}

// secretTexts are dsn with the bytes Redact masks marked, the same percent-decoded, and each password
// alone: as written, percent-decoded, and unquoted as libpq reads a key=value.
func secretTexts(dsn string) []secretText {
	spans := secretSpans(dsn)
	if len(spans) == 0 {
		return nil
	}
	raw := secretText{s: dsn, secret: make([]bool, len(dsn))}
	for _, sp := range spans {
		for i := sp.start; i < sp.end; i++ {
			raw.secret[i] = true
		}
	}
	out := []secretText{raw, unescaped(raw)}
	addWhole := func(s string) {
		if s != "" {
			out = append(out, secretText{s: s, secret: slices.Repeat([]bool{true}, len(s))})
		}
	}
	for _, sp := range spans {
		addWhole(dsn[sp.start:sp.end])
		addWhole(unescaped(secretText{s: dsn[sp.start:sp.end], secret: make([]bool, sp.end-sp.start)}).s)
	}
	if kv, err := dsnPairs(strings.TrimSpace(dsn)); err == nil {
		for _, p := range kv {
			if strings.Contains(strings.ToLower(p[0]), "pass") {
				addWhole(p[1])
			}
		}
	}
	return out
}

// unescaped decodes every valid %XX in t, as url.Parse would, and marks a decoded byte secret when one
// of the three it comes from is.
func unescaped(t secretText) secretText {
	out := secretText{secret: make([]bool, 0, len(t.s))}
	var b []byte
	for i := 0; i < len(t.s); i++ {
		if t.s[i] == '%' && i+2 < len(t.s) && isHex(t.s[i+1]) && isHex(t.s[i+2]) {
			b = append(b, unhex(t.s[i+1])<<4|unhex(t.s[i+2]))
			out.secret = append(out.secret, t.secret[i] || t.secret[i+1] || t.secret[i+2])
			i += 2
			continue
		}
		b = append(b, t.s[i])
		out.secret = append(out.secret, t.secret[i])
	}
	out.s = string(b)
	return out
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
