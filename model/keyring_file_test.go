package model_test

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/model"
)

// TestParseKeyring reads a keyring file, and refuses bad input naming the file and the line, never quoting
// a key (nor its base64, nor the text after "=" of a bad line).
func TestParseKeyring(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(0x41), testKey(0x42)[:16]
	b1, b2 := base64.StdEncoding.EncodeToString(k1), base64.StdEncoding.EncodeToString(k2)
	good := "# bunbox payload keys\n\n  current = 2026-12 \n2026-11=" + b1 + "\n2026-12=" + b2 + "\n"
	ring, err := model.ParseKeyring(strings.NewReader(good), "keys.txt")
	require.NoError(t, err)
	require.Equal(t, "2026-12", ring.Current())
	require.Equal(t, []string{"2026-11", "2026-12"}, ring.IDs())

	// It decodes what a Keyring of the same keys encrypted.
	c, err := model.NewCodec(model.EncryptWith(testKeyring(t, "2026-11", map[string][]byte{"2026-11": k1})))
	require.NoError(t, err)
	ev, err := model.NewEvent("doc.saved", map[string]string{"a": "b"})
	require.NoError(t, err)
	data, encoding, keyID, err := c.Encode(ev.EventID, ev.Payload)
	require.NoError(t, err)
	dec, err := model.NewCodec(model.EncryptWith(ring))
	require.NoError(t, err)
	plain, err := dec.Decode(ev.EventID, encoding, keyID, data)
	require.NoError(t, err)
	require.JSONEq(t, string(ev.Payload), string(plain))

	shortKey := base64.StdEncoding.EncodeToString(k1[:20])
	b24 := base64.StdEncoding.EncodeToString(testKey(0x43)[:24])
	for _, tt := range []struct {
		name, file, msg string
	}{
		{"BareKey", "current=a\n" + b1 + "\n", `keys.txt line 2: nothing after "="`},
		{"BareKey16", "current=a\n" + b2 + "\n", `keys.txt line 2: the key is not standard base64`},
		{"BareKey24", "current=a\n" + b24 + "\n", `keys.txt line 2: want "id=base64 key"`},
		{"EmptyID", "current=a\n=" + b1 + "\n", "line 2: the key id before \"=\" is empty"},
		{"BadID", "current=a\na b=" + b1 + "\n", "line 2: the key id must be 1 to 64 bytes"},
		{"BadBase64", "current=a\na=" + b1[:10] + "!!" + b1[12:] + "\n", `line 2: the key is not standard base64`},
		{"WrongLength", "current=a\na=" + shortKey + "\n", `line 2: the key is 20 bytes; AES needs 16, 24 or 32`},
		{"Twice", "current=a\na=" + b1 + "\na=" + b1 + "\n", `line 3: the key id of line 2 is given again`},
		{"TwoCurrents", "current=a\ncurrent=b\na=" + b1 + "\n", `line 2: a second "current" line (the first is line 1)`},
		{"EmptyCurrent", "current=\na=" + b1 + "\n", `line 1: "current" names no key id`},
		{"NoCurrent", "a=" + b1 + "\n", `keys.txt: has no "current=id" line`},
		{"UnknownCurrent", "current=" + b2 + "\na=" + b1 + "\n", "keys.txt line 1: the current key id is not among the key ids of the file (a;"},
		{"NoKeys", "# nothing\n", "keys.txt: holds no key"},
		{"LongLine", "current=a\na=" + strings.Repeat("A", 70<<10) + "\n", "line 2: longer than 64 KiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := model.ParseKeyring(strings.NewReader(tt.file), "keys.txt")
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.msg)
			for _, secret := range []string{b1, b2, b24, strings.TrimRight(b1, "="), strings.TrimRight(b2, "="), shortKey, b1[:10], b1[12:], string(k1), hex.EncodeToString(k1), hex.EncodeToString(k2)} {
				require.NotContains(t, err.Error(), secret, "no key material in the error")
			}
		})
	}

	path := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(path, []byte(good), 0o600))
	ring, err = model.ReadKeyringFile(path)
	require.NoError(t, err)
	require.Equal(t, "Keyring(current 2026-12; ids 2026-11, 2026-12)", ring.String())
	_, err = model.ReadKeyringFile(path + ".missing")
	require.ErrorContains(t, err, path+".missing")
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestReadKeyringFileRefusesOpenModes: a keyring file its group or others may read (or write) is refused
// with its name, its mode and the chmod to run, as ssh refuses such a private key; 0600 and 0400 are read.
func TestReadKeyringFileRefusesOpenModes(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no mode bits on Windows")
	}
	b := base64.StdEncoding.EncodeToString(testKey(0x41))
	for _, tt := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o644, false}, {0o640, false}, {0o604, false}, {0o620, false}, {0o666, false}} {
		t.Run(fmt.Sprintf("%#o", tt.mode), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "keys")
			require.NoError(t, os.WriteFile(path, []byte("current=a\na="+b+"\n"), 0o600))
			require.NoError(t, os.Chmod(path, tt.mode)) // not under the umask
			ring, err := model.ReadKeyringFile(path)
			if tt.ok {
				require.NoError(t, err)
				require.Equal(t, "a", ring.Current())
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), path)
			require.Contains(t, err.Error(), fmt.Sprintf("mode %#o", tt.mode))
			require.Contains(t, err.Error(), "chmod 600 "+path)
			require.NotContains(t, err.Error(), b)
		})
	}
}
