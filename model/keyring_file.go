package model

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
)

// keyringCurrentLine is the name of the line of a keyring file (ReadKeyringFile) that names the current
// key id; it cannot be a key id of such a file.
const keyringCurrentLine = "current"

// ReadKeyringFile reads the Keyring of the file at path (see ParseKeyring for its format): what a process
// started from a command line (`bunbox relay -codec-keys-file`, OUTBOX_CODEC_KEYS_FILE) is given instead
// of keys, which would show in `ps` and in shell histories. Errors name the file and the line, never a
// key nor any text of a line that may hold one.
//
// As ssh does with a private key, it refuses a file that its group or others may read or write (mode
// 0644, 0640, 0660...), naming the file, its mode and the fix (chmod 600): its keys decrypt every
// payload. A Kubernetes Secret mounted as a volume is 0644 unless its defaultMode (or items' mode) says
// 0400; a Docker secret is 0444 unless its mode says 0400.
func ReadKeyringFile(path string) (*Keyring, error) {
	f, err := os.Open(path) //nolint:gosec // the operator names the file of keys to read
	if err != nil {
		return nil, fmt.Errorf("model: keyring file: %w", err)
	}
	defer f.Close()
	if err := keyringFileMode(f, path); err != nil {
		return nil, err
	}
	return ParseKeyring(f, path)
}

// keyringFileMode refuses a keyring file open to its group or others. Windows has no such bits: there,
// the file's ACL is the operator's to set.
func keyringFileMode(f *os.File, path string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("model: keyring file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("model: keyring file %s has mode %#o: its group or others may read or write it, and its keys decrypt every payload; "+
			"run chmod 600 %s (or 400), as ssh wants of a private key", path, perm, path)
	}
	return nil
}

// ParseKeyring reads a Keyring in the keyring file format from r; name names r in errors. One entry a
// line, blank lines and lines starting with # skipped, white space around names and values trimmed:
//
//	# bunbox payload keys
//	current=2026-12
//	2026-11=q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=
//	2026-12=...
//
// The line "current=ID" names the key that encrypts; every other line is "id=key", the key in standard
// base64 (with padding; `openssl rand -base64 32` writes one) of 16, 24 or 32 bytes. An id is what
// NewKeyring takes, and not "current". An error names the source and the line: a line without "=", an id
// given twice, a key that is not base64 or of the wrong length, a missing or unknown current id. It quotes
// no text of a line, which may be key material (a bare base64 key cuts at its padding "=" into an "id").
func ParseKeyring(r io.Reader, name string) (*Keyring, error) {
	fail := func(line int, format string, args ...any) error {
		where := "model: keyring " + name
		if line > 0 {
			where += fmt.Sprintf(" line %d", line)
		}
		return fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...))
	}
	keys := map[string]lineKey{}
	current, currentLine := "", 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		id, value, ok := strings.Cut(text, "=")
		id, value = strings.TrimSpace(id), strings.TrimSpace(value)
		switch {
		case !ok:
			return nil, fail(n, `want "id=base64 key" or "current=id" (the line is not shown: it may hold a key)`)
		case id == "":
			return nil, fail(n, `the key id before "=" is empty`)
		case len(id) > maxKeyIDLength || !printableASCII(id):
			return nil, fail(n, "the key id must be 1 to %d bytes of printable ASCII without spaces (not shown: it may be a key)", maxKeyIDLength)
		case id == keyringCurrentLine:
			if currentLine > 0 {
				return nil, fail(n, "a second %q line (the first is line %d)", keyringCurrentLine, currentLine)
			}
			if value == "" {
				return nil, fail(n, "%q names no key id", keyringCurrentLine)
			}
			current, currentLine = value, n
			continue
		}
		// From here the id is not quoted either: a line that is a bare base64 key cuts at its padding "=".
		if value == "" {
			return nil, fail(n, `nothing after "=": want "id=base64 key" (the line is not shown: it may hold a key)`)
		}
		if first, dup := keys[id]; dup {
			return nil, fail(n, "the key id of line %d is given again", first.line)
		}
		key, err := base64.StdEncoding.Strict().DecodeString(value)
		if err != nil {
			return nil, fail(n, "the key is not standard base64 (the line is not shown)")
		}
		switch len(key) {
		case 16, 24, 32:
		default:
			return nil, fail(n, "the key is %d bytes; AES needs 16, 24 or 32", len(key))
		}
		keys[id] = lineKey{key: key, line: n}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fail(n+1, "longer than 64 KiB")
		}
		return nil, fail(0, "read: %v", err)
	}
	switch {
	case len(keys) == 0:
		return nil, fail(0, "holds no key (want lines id=base64 key)")
	case currentLine == 0:
		return nil, fail(0, "has no %q line naming the key that encrypts", keyringCurrentLine+"=id")
	}
	if _, ok := keys[current]; !ok {
		return nil, fail(currentLine, "the current key id is not among the key ids of the file (%s; the current id is not shown: it may be a key)",
			strings.Join(slices.Sorted(maps.Keys(keys)), ", "))
	}
	plain := make(map[string][]byte, len(keys))
	for id, k := range keys {
		plain[id] = k.key
	}
	ring, err := NewKeyring(current, plain)
	for _, k := range keys {
		clear(k.key) // NewKeyring copied them
	}
	if err != nil {
		return nil, fail(0, "%v", err)
	}
	return ring, nil
}

// lineKey is a key of a keyring file and the line it is on.
type lineKey struct {
	key  []byte
	line int
}
