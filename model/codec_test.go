package model_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// testKey is a 32-byte AES key that tests look for in every error and string.
func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func testKeyring(t *testing.T, current string, keys map[string][]byte) *model.Keyring {
	t.Helper()
	k, err := model.NewKeyring(current, keys)
	require.NoError(t, err)
	return k
}

func testCodec(t *testing.T, opts ...model.CodecOption) *model.Codec {
	t.Helper()
	c, err := model.NewCodec(opts...)
	require.NoError(t, err)
	return c
}

// requireNoKey fails when s shows one of the keys, raw or in hex.
func requireNoKey(t *testing.T, s string, keys ...[]byte) {
	t.Helper()
	for _, k := range keys {
		require.NotContains(t, s, string(k))
		require.NotContains(t, strings.ToLower(s), hex.EncodeToString(k))
		dec := make([]string, len(k)) // as %v prints a byte slice: [17 17 ...]
		for i, b := range k {
			dec[i] = strconv.Itoa(int(b))
		}
		require.NotContains(t, s, strings.Join(dec, " "))
	}
}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	ring := testKeyring(t, "k1", map[string][]byte{"k1": testKey(1)})
	big := []byte(`{"text":"` + strings.Repeat("compress me ", 200) + `"}`)
	small := []byte(`{"n":1}`)
	tests := []struct {
		name     string
		opts     []model.CodecOption
		payload  []byte
		encoding string
		keyID    string
	}{
		{"SmallPayloadBelowThreshold", []model.CodecOption{model.CompressAbove(64)}, small, "", ""},
		{"Compressed", []model.CodecOption{model.CompressAbove(64)}, big, "gzip", ""},
		{"IncompressibleStaysPlain", []model.CodecOption{model.CompressAbove(0)}, []byte(`"x"`), "", ""},
		{"Encrypted", []model.CodecOption{model.EncryptWith(ring)}, small, "aes-gcm", "k1"},
		{"CompressedAndEncrypted", []model.CodecOption{model.CompressAbove(64), model.EncryptWith(ring)}, big, "gzip+aes-gcm", "k1"},
		{"SmallEncryptedNotCompressed", []model.CodecOption{model.CompressAbove(64), model.EncryptWith(ring)}, small, "aes-gcm", "k1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := testCodec(t, tt.opts...)
			id := uuid.New()
			data, encoding, keyID, err := c.Encode(id, tt.payload)
			require.NoError(t, err)
			require.Equal(t, tt.encoding, encoding)
			require.Equal(t, tt.keyID, keyID)
			if encoding == "" {
				require.Equal(t, tt.payload, data)
				return
			}
			require.NotEqual(t, tt.payload, data)
			if strings.HasPrefix(encoding, "gzip") {
				require.Less(t, len(data), len(tt.payload))
			}
			plain, err := c.Decode(id, encoding, keyID, data)
			require.NoError(t, err)
			require.Equal(t, tt.payload, plain)

			ev := &model.Event{EventID: id, PayloadEncoded: data, Payload: []byte("null"),
				Metadata: map[string]string{wire.HeaderPayloadEncoding: encoding, wire.HeaderPayloadKeyID: keyID, "tenant": "t1"}}
			if keyID == "" {
				delete(ev.Metadata, wire.HeaderPayloadKeyID)
			}
			desc := wire.DescribeEncoded(ev.Metadata, ev.PayloadEncoded, ev.Payload)
			if keyID != "" {
				require.Contains(t, desc, "encrypted (key id k1)")
			} else {
				require.Contains(t, desc, "gzip-compressed")
			}
			require.NoError(t, c.DecodeEvent(ev))
			require.Equal(t, tt.payload, []byte(ev.Payload))
			require.Nil(t, ev.PayloadEncoded)
			require.Equal(t, map[string]string{"tenant": "t1"}, ev.Metadata)
		})
	}
}

// TestCodecKeyRotation: a payload encrypted under the old current key decodes after the current key
// changed, for as long as the keyring keeps the old key; new payloads use the new key.
func TestCodecKeyRotation(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	old := testCodec(t, model.EncryptWith(testKeyring(t, "2026-01", map[string][]byte{"2026-01": testKey(1)})))
	data, _, keyID, err := old.Encode(id, []byte(`{"pii":"alice"}`))
	require.NoError(t, err)
	require.Equal(t, "2026-01", keyID)

	rotated := testCodec(t, model.EncryptWith(testKeyring(t, "2026-02", map[string][]byte{"2026-01": testKey(1), "2026-02": testKey(2)})))
	plain, err := rotated.Decode(id, "aes-gcm", keyID, data)
	require.NoError(t, err)
	require.JSONEq(t, `{"pii":"alice"}`, string(plain))
	_, _, newID, err := rotated.Encode(id, []byte(`{}`))
	require.NoError(t, err)
	require.Equal(t, "2026-02", newID)

	retired := testCodec(t, model.EncryptWith(testKeyring(t, "2026-02", map[string][]byte{"2026-02": testKey(2)})))
	_, err = retired.Decode(id, "aes-gcm", keyID, data)
	require.ErrorIs(t, err, model.ErrUnknownKeyID)
	require.ErrorContains(t, err, `key id "2026-01"`)
	require.ErrorContains(t, err, "the keyring holds 2026-02")
	requireNoKey(t, err.Error(), testKey(1), testKey(2))
}

// TestCodecDecodeFailsLoudly: each bad input gets an error naming what is wrong, never a key.
func TestCodecDecodeFailsLoudly(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	k1 := testKey(1)
	c := testCodec(t, model.CompressAbove(0), model.EncryptWith(testKeyring(t, "k1", map[string][]byte{"k1": k1})))
	data, encoding, keyID, err := c.Encode(id, []byte(`{"a":"`+strings.Repeat("a", 100)+`"}`))
	require.NoError(t, err)
	require.Equal(t, "gzip+aes-gcm", encoding)

	wrongKey := testCodec(t, model.EncryptWith(testKeyring(t, "k1", map[string][]byte{"k1": testKey(9)})))
	flipped := bytes.Clone(data)
	flipped[len(flipped)-1] ^= 1
	tests := []struct {
		name string
		c    *model.Codec
		id   uuid.UUID
		enc  string
		key  string
		data []byte
		is   error
		msg  string
	}{
		{"WrongKeyUnderTheID", wrongKey, id, encoding, keyID, data, model.ErrCorruptPayload, "AES-GCM authentication failed"},
		{"AlteredCiphertext", c, id, encoding, keyID, flipped, model.ErrCorruptPayload, "AES-GCM authentication failed"},
		{"AnotherEventsPayload", c, uuid.New(), encoding, keyID, data, model.ErrCorruptPayload, "AES-GCM authentication failed"},
		{"EncodingHeaderAltered", c, id, "aes-gcm", keyID, data, model.ErrCorruptPayload, "AES-GCM authentication failed"},
		{"Truncated", c, id, encoding, keyID, data[:10], model.ErrCorruptPayload, "shorter than nonce and tag"},
		{"UnknownKeyID", c, id, encoding, "k0", data, model.ErrUnknownKeyID, `key id "k0"`},
		{"NoKeyring", testCodec(t), id, encoding, keyID, data, model.ErrUnknownKeyID, "the codec has no keyring"},
		{"NilCodec", nil, id, encoding, keyID, data, model.ErrUnknownKeyID, "the codec has no keyring"},
		{"UnknownEncoding", c, id, "zstd", "", data, model.ErrCorruptPayload, "unknown encoding"},
		{"KeyIDWithoutEncryption", c, id, "gzip", "k1", data, model.ErrCorruptPayload, "names a key id"},
		{"NotGzip", c, id, "gzip", "", []byte("plain"), model.ErrCorruptPayload, "gzip:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.c.Decode(tt.id, tt.enc, tt.key, tt.data)
			require.ErrorIs(t, err, tt.is)
			require.ErrorContains(t, err, tt.msg)
			require.ErrorContains(t, err, tt.id.String())
			requireNoKey(t, err.Error(), k1, testKey(9))
		})
	}
}

func TestNewKeyringAndCodecValidate(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdeX") // 32 bytes
	for _, tt := range []struct {
		name    string
		current string
		keys    map[string][]byte
		msg     string
	}{
		{"NoCurrent", "", map[string][]byte{"k1": secret}, "current must name a key id"},
		{"CurrentMissing", "k2", map[string][]byte{"k1": secret}, `current key id "k2" is not among the keys`},
		{"ShortKey", "k1", map[string][]byte{"k1": secret[:15]}, `key "k1" is 15 bytes; AES needs 16, 24 or 32`},
		{"SpaceInID", "k 1", map[string][]byte{"k 1": secret}, "printable ASCII without spaces"},
		{"LongID", "k1", map[string][]byte{"k1": secret, strings.Repeat("k", 65): secret}, "1 to 64 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := model.NewKeyring(tt.current, tt.keys)
			require.ErrorContains(t, err, tt.msg)
			requireNoKey(t, err.Error(), secret, secret[:15])
		})
	}
	_, err := model.NewCodec(model.CompressAbove(-1))
	require.ErrorContains(t, err, "CompressAbove must not be negative")
	_, err = model.NewCodec(model.EncryptWith(nil))
	require.ErrorContains(t, err, "EncryptWith: the Keyring must not be nil")

	// Neither the Keyring nor the Codec shows a key, however it is printed.
	keys := map[string][]byte{"k1": secret}
	ring := testKeyring(t, "k1", keys)
	secret[0] = 'Z' // the Keyring copied the key
	c := testCodec(t, model.CompressAbove(10), model.EncryptWith(ring))
	for _, s := range []string{fmt.Sprint(ring), fmt.Sprintf("%+v", ring), fmt.Sprintf("%#v", ring),
		fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%v", *c)} {
		requireNoKey(t, s, secret, []byte("0123456789abcdef0123456789abcdeX"))
	}
	require.Equal(t, "Codec(gzip above 10 bytes; aes-gcm with Keyring(current k1; ids k1))", c.String())
	id := uuid.New()
	data, _, _, err := c.Encode(id, []byte(`{}`))
	require.NoError(t, err)
	other := testCodec(t, model.EncryptWith(testKeyring(t, "k1", map[string][]byte{"k1": secret})))
	_, err = other.Decode(id, "aes-gcm", "k1", data)
	require.ErrorIs(t, err, model.ErrCorruptPayload, "the keyring kept its own copy of the key")
}
