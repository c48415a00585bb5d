package model

import (
	"bytes"
	"compress/gzip"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/internal/wire"
)

// Errors of decoding a payload; the error that wraps them names the event and the key id, never a key.
var (
	// ErrUnknownKeyID: the payload was encrypted with a key id that the decoding Keyring does not hold (a
	// key retired too early, or a relay or worker that was not given the new key).
	ErrUnknownKeyID = errors.New("model: payload encrypted with a key id the keyring does not hold")
	// ErrCorruptPayload: the encoded payload does not decode (altered, truncated, encrypted with another
	// key under the same id, or an encoding this version does not know), or decodes to more than the
	// Codec's limit (MaxDecodedSize).
	ErrCorruptPayload = errors.New("model: encoded payload does not decode")
	// ErrNoCodec: the payload is encoded and the reader was given no Codec to decode it.
	ErrNoCodec = errors.New("model: payload is encoded and no codec was given to decode it")
)

// maxKeyIDLength is the longest key id of a Keyring, in bytes.
const maxKeyIDLength = 64

// Keyring holds the AES keys of a Codec by id: it encrypts with the current key and decrypts with the key
// whose id the payload names, so that keys rotate without re-encrypting what was written before. Its
// String and GoString show the ids only; no method returns a key.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// NewKeyring returns the Keyring of keys (key id → AES key of 16, 24 or 32 bytes) that encrypts with the
// key current. To rotate, add the new key, make it current, and keep the old ones for as long as rows or
// tasks encrypted with them may still be read (the outbox's pending and dead rows, and asynq's tasks when
// the consumer decodes). An id is printable ASCII without spaces, at most 64 bytes. The keys are
// copied; the errors name ids, never keys.
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	if current == "" {
		return nil, errors.New("model: NewKeyring: current must name a key id")
	}
	k := &Keyring{current: current, aeads: make(map[string]cipher.AEAD, len(keys))}
	for id, key := range keys {
		if id == "" || len(id) > maxKeyIDLength || !printableASCII(id) {
			return nil, fmt.Errorf("model: NewKeyring: key id %q must be 1 to %d bytes of printable ASCII without spaces", id, maxKeyIDLength)
		}
		switch len(key) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("model: NewKeyring: key %q is %d bytes; AES needs 16, 24 or 32", id, len(key))
		}
		block, err := aes.NewCipher(bytes.Clone(key))
		if err != nil {
			return nil, fmt.Errorf("model: NewKeyring: key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("model: NewKeyring: key %q: %w", id, err)
		}
		k.aeads[id] = aead
	}
	if _, ok := k.aeads[current]; !ok {
		return nil, fmt.Errorf("model: NewKeyring: current key id %q is not among the keys", current)
	}
	return k, nil
}

// Current returns the id of the key that encrypts.
func (k *Keyring) Current() string { return k.current }

// IDs returns the ids of the keys, sorted.
func (k *Keyring) IDs() []string { return slices.Sorted(maps.Keys(k.aeads)) }

// String shows the key ids, never a key.
func (k *Keyring) String() string {
	if k == nil {
		return "Keyring(nil)"
	}
	return fmt.Sprintf("Keyring(current %s; ids %s)", k.current, strings.Join(k.IDs(), ", "))
}

// GoString is String, so that %#v shows no key either.
func (k *Keyring) GoString() string { return k.String() }

// Codec encodes the payloads an Outbox writes (bunx.WithLocation) and decodes them where they are read: in the
// relay before it enqueues (relay.Config.Location.Codec), or in the consumer (worker.WithLocation). It compresses
// a payload above a size with gzip (CompressAbove), encrypts it with AES-GCM under the current key of a
// Keyring (EncryptWith), or both, compression first. The encoded bytes are bound to the event id: they do
// not decode as another event's payload.
//
// A Codec that decodes only needs the Keyring of the keys it may meet; gzip needs no setting. Its String,
// GoString show no key. A Codec is safe for concurrent use.
//
// A Codec encodes and decodes payloads of at most MaxDecodedSize bytes (1 MiB by default), counted before
// encoding: compression cannot smuggle a larger payload past the writer's limit, which with a codec
// counts the bytes as written.
type Codec struct {
	compressAbove int // compress payloads of more bytes; -1: never
	keys          *Keyring
	maxDecoded    int // the largest payload before encoding, in bytes (MaxDecodedSize)
}

// CodecOption configures a Codec.
type CodecOption func(*Codec) error

// CompressAbove makes the Codec gzip a payload larger than n bytes, when that makes it smaller. n must not
// be negative. Defaults to no compression.
func CompressAbove(n int) CodecOption {
	return func(c *Codec) error {
		if n < 0 {
			return fmt.Errorf("CompressAbove must not be negative (got %d)", n)
		}
		c.compressAbove = n
		return nil
	}
}

// EncryptWith makes the Codec encrypt every payload with AES-GCM under k's current key, and decrypt with
// the key a payload names. Defaults to no encryption (and a Codec without a Keyring refuses an encrypted
// payload with ErrUnknownKeyID).
func EncryptWith(k *Keyring) CodecOption {
	return func(c *Codec) error {
		if k == nil {
			return errors.New("EncryptWith: the Keyring must not be nil")
		}
		c.keys = k
		return nil
	}
}

// MaxDecodedSize makes n the largest payload the Codec encodes or decodes, in bytes before encoding (the
// JSON, or the bytes of a bytes event). Encode refuses a larger payload, so bunx's Record fails the
// transaction with an error that names the event and this limit; Decode stops reading a payload that
// decodes to more (a compression bomb: 64 MiB of JSON gzips to about 64 KiB) and fails it with
// ErrCorruptPayload, naming the limit. It bounds the memory a reader spends on one payload: the relay
// (relay.Config.Location.Codec) marks such a row dead, kept, with a last_error that names the limit, and counts
// the payloads it decodes against relay.Config.BatchBytes. Give the readers' Codecs (the relay's, the
// consumer's: worker.WithLocation) a limit at least the writer's. n is 1 to 64 MiB.
// Defaults to 1 MiB, the Outbox's default limit on a plain JSON payload.
func MaxDecodedSize(n int) CodecOption {
	return func(c *Codec) error {
		if n < 1 || n > wire.MaxPayloadSizeCeiling {
			return fmt.Errorf("MaxDecodedSize must be between 1 and %d (MaxPayloadSizeCeiling), got %d", wire.MaxPayloadSizeCeiling, n)
		}
		c.maxDecoded = n
		return nil
	}
}

// NewCodec returns a Codec with opts; an invalid option is an error that names it.
func NewCodec(opts ...CodecOption) (*Codec, error) {
	c := &Codec{compressAbove: -1, maxDecoded: wire.DefaultMaxPayloadSize}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(c); err != nil {
			return nil, fmt.Errorf("model: NewCodec: %w", err)
		}
	}
	return c, nil
}

// String describes the Codec without its keys.
func (c *Codec) String() string {
	if c == nil {
		return "Codec(nil)"
	}
	var parts []string
	if c.compressAbove >= 0 {
		parts = append(parts, fmt.Sprintf("gzip above %d bytes", c.compressAbove))
	}
	if c.keys != nil {
		parts = append(parts, "aes-gcm with "+c.keys.String())
	}
	if limit := c.DecodedLimit(); limit != wire.DefaultMaxPayloadSize {
		parts = append(parts, fmt.Sprintf("payloads up to %d bytes", limit))
	}
	if len(parts) == 0 {
		return "Codec(decode gzip only)"
	}
	return "Codec(" + strings.Join(parts, "; ") + ")"
}

// GoString is String, so that %#v shows no key either.
func (c *Codec) GoString() string { return c.String() }

// DecodedLimit is the largest payload the Codec encodes or decodes, in bytes before encoding (see
// MaxDecodedSize); 1 MiB for a nil Codec, which decodes gzip only.
func (c *Codec) DecodedLimit() int {
	if c == nil || c.maxDecoded <= 0 {
		return wire.DefaultMaxPayloadSize
	}
	return c.maxDecoded
}

// Encodes reports whether the Codec encodes a payload of size bytes: it encrypts every payload, and
// compresses those above its threshold.
func (c *Codec) Encodes(size int) bool {
	return c != nil && (c.keys != nil || (c.compressAbove >= 0 && size > c.compressAbove))
}

// Encode returns payload as the Codec encodes it for the event eventID, the encoding (the value of
// bunbox-payload-encoding, "" when the Codec leaves the payload as it is: the result is then payload itself)
// and the key id (bunbox-payload-key-id's value, "" when not encrypted). A payload it would encode that is
// larger than its limit (MaxDecodedSize) is an error that names the limit.
func (c *Codec) Encode(eventID uuid.UUID, payload []byte) (data []byte, encoding, keyID string, err error) {
	if !c.Encodes(len(payload)) {
		return payload, "", "", nil
	}
	if limit := c.DecodedLimit(); len(payload) > limit {
		return nil, "", "", fmt.Errorf("model: payload is %d bytes, over the codec's limit of %d (model.MaxDecodedSize)",
			len(payload), limit)
	}
	data = payload
	var steps []string
	if c.compressAbove >= 0 && len(payload) > c.compressAbove {
		var b bytes.Buffer
		b.Grow(len(payload) / 2)
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write(payload); err != nil {
			return nil, "", "", fmt.Errorf("model: gzip payload: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, "", "", fmt.Errorf("model: gzip payload: %w", err)
		}
		if b.Len() < len(payload) {
			data, steps = b.Bytes(), append(steps, wire.EncodingGzip)
		}
	}
	if c.keys != nil {
		keyID = c.keys.current
		steps = append(steps, wire.EncodingAESGCM)
		encoding = strings.Join(steps, "+")
		aead := c.keys.aeads[keyID]
		out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(data)+aead.Overhead())
		if _, err := rand.Read(out); err != nil {
			return nil, "", "", fmt.Errorf("model: payload nonce: %w", err)
		}
		data = aead.Seal(out, out, data, additionalData(eventID, encoding, keyID))
		return data, encoding, keyID, nil
	}
	if len(steps) == 0 {
		return payload, "", "", nil // compression did not help: plain JSON
	}
	return data, strings.Join(steps, "+"), "", nil
}

// additionalData is what AES-GCM authenticates with the ciphertext: the event id, the encoding and the key
// id, so that encoded bytes moved to another event, or headers altered, do not decode.
func additionalData(eventID uuid.UUID, encoding, keyID string) []byte {
	b := make([]byte, 0, 16+len(encoding)+len(keyID)+2)
	b = append(b, eventID[:]...)
	b = append(append(b, 0), encoding...)
	return append(append(b, 0), keyID...)
}

// Decode returns the payload that data, the payload of the event eventID encoded as encoding (with the key
// keyID when encrypted), encoded. The decoded payload is at most the Codec's limit (MaxDecodedSize): one
// that decodes to more is an ErrCorruptPayload, found after decoding one byte past the limit. An error
// names the event, the encoding and the key id, and wraps ErrUnknownKeyID (the key is not in the Keyring,
// or the Codec has none) or ErrCorruptPayload (the bytes do not decode). A nil Codec decodes gzip only.
func (c *Codec) Decode(eventID uuid.UUID, encoding, keyID string, data []byte) ([]byte, error) {
	steps := strings.Split(encoding, "+")
	fail := func(err error, format string, args ...any) error {
		what := fmt.Sprintf("event %s, encoding %q", eventID, encoding)
		if keyID != "" {
			what += fmt.Sprintf(", key id %q", keyID)
		}
		return fmt.Errorf("%w (%s): %s", err, what, fmt.Sprintf(format, args...))
	}
	switch {
	case encoding == "":
		return nil, fail(ErrCorruptPayload, "no encoding named")
	case len(steps) > 2, len(steps) == 2 && (steps[0] != wire.EncodingGzip || steps[1] != wire.EncodingAESGCM),
		len(steps) == 1 && steps[0] != wire.EncodingGzip && steps[0] != wire.EncodingAESGCM:
		return nil, fail(ErrCorruptPayload, "unknown encoding (this version knows gzip, aes-gcm and gzip+aes-gcm)")
	case (steps[len(steps)-1] == wire.EncodingAESGCM) != (keyID != ""):
		return nil, fail(ErrCorruptPayload, "an encrypted payload names a key id, and only an encrypted one")
	}
	if steps[len(steps)-1] == wire.EncodingAESGCM {
		var aead cipher.AEAD
		if c != nil && c.keys != nil {
			aead = c.keys.aeads[keyID]
		}
		if aead == nil {
			have := "the codec has no keyring"
			if c != nil && c.keys != nil {
				have = "the keyring holds " + strings.Join(c.keys.IDs(), ", ")
			}
			return nil, fail(ErrUnknownKeyID, "%s", have)
		}
		if len(data) < aead.NonceSize()+aead.Overhead() {
			return nil, fail(ErrCorruptPayload, "ciphertext of %d bytes is shorter than nonce and tag", len(data))
		}
		nonce := data[:aead.NonceSize()]
		plain, err := aead.Open(nil, nonce, data[aead.NonceSize():], additionalData(eventID, encoding, keyID))
		if err != nil {
			return nil, fail(ErrCorruptPayload, "AES-GCM authentication failed (altered bytes, or another key under this id)")
		}
		data = plain
		steps = steps[:len(steps)-1]
	}
	limit := c.DecodedLimit()
	if len(steps) == 1 { // gzip
		plain, err := gunzip(data, limit)
		if err != nil {
			return nil, fail(ErrCorruptPayload, "%v", err)
		}
		data = plain
	}
	if len(data) > limit {
		return nil, fail(ErrCorruptPayload, "the payload is %d bytes, over the codec's limit of %d (model.MaxDecodedSize)", len(data), limit)
	}
	return data, nil
}

// gunzip decompresses data, refusing more than limit bytes of output. The output is read into a buffer of
// the size gzip's trailer gives (within limit), so that a payload takes about its own size and not up to
// twice it: the trailer is only a hint, and a wrong one costs the buffer's growth.
func gunzip(data []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	size := limit
	if len(data) >= 4 {
		size = min(size, int(binary.LittleEndian.Uint32(data[len(data)-4:]))) // ISIZE: the size mod 2^32
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead)) // room to read the end of the stream
	if _, err := buf.ReadFrom(io.LimitReader(zr, int64(limit)+1)); err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	plain := buf.Bytes()
	if len(plain) > limit {
		return nil, fmt.Errorf("decompresses to more than %d bytes, the codec's limit (model.MaxDecodedSize)", limit)
	}
	return plain, nil
}

// DecodeEvent decodes ev's payload in place when it is encoded (ev.PayloadEncoded is set): Payload becomes
// the decoded payload, PayloadEncoded nil, and Metadata a copy without bunbox-payload-encoding and
// bunbox-payload-key-id. An event whose payload is not encoded is left as it is; the bytes of a bytes event
// (NewBytesEvent) stored without encoding become its Payload. Errors are Decode's.
func (c *Codec) DecodeEvent(ev *Event) error {
	if ev.PayloadEncoded == nil {
		return nil
	}
	if _, named := ev.Metadata[wire.HeaderPayloadEncoding]; !named && wire.IsBytes(ev.Metadata) {
		ev.Payload, ev.PayloadEncoded = ev.PayloadEncoded, nil
		return nil
	}
	plain, err := c.Decode(ev.EventID, ev.Metadata[wire.HeaderPayloadEncoding], ev.Metadata[wire.HeaderPayloadKeyID], ev.PayloadEncoded)
	if err != nil {
		return err
	}
	ev.Payload, ev.PayloadEncoded = plain, nil
	ev.Metadata = wire.WithoutEncodingHeaders(ev.Metadata)
	return nil
}

// Keyring returns the Codec's Keyring, nil when it does not encrypt.
func (c *Codec) Keyring() *Keyring {
	if c == nil {
		return nil
	}
	return c.keys
}
