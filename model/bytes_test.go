package model_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// binaryPayload is bytes that are not JSON: NUL bytes, invalid UTF-8, a JSON-looking fragment with a
// \u0000 escape (which jsonb refuses), and a compressible run.
func binaryPayload() []byte {
	b := []byte{0, 0xff, 0xfe, 0xc3, 0x28, '{', '"', 'a', '"', ':', '"', '\\', 'u', '0', '0', '0', '0', '"', '}', 0}
	return append(b, bytes.Repeat([]byte{0, 0x80, 'x'}, 300)...)
}

// TestNewBytesEvent: the bytes are kept as they are (copied), the metadata marks them, the options apply,
// and what makes no sense is refused naming the field.
func TestNewBytesEvent(t *testing.T) {
	t.Parallel()
	data := binaryPayload()
	ev, err := model.NewBytesEvent("blob.saved", data, model.WithQueue("blobs"), model.WithMetadata("tenant", "t1"),
		model.WithOrderingKey("k"))
	require.NoError(t, err)
	require.Equal(t, data, []byte(ev.Payload))
	data[0] = 'X'
	require.NotEqual(t, data[0], ev.Payload[0], "the bytes are copied")
	require.Equal(t, map[string]string{"tenant": "t1", wire.HeaderPayloadFormat: wire.PayloadFormatBytes}, ev.Metadata)
	require.True(t, wire.IsBytes(ev.Metadata))
	require.Equal(t, "blobs", ev.Queue)
	require.Equal(t, "k", ev.OrderingKey)
	require.NoError(t, ev.Validate(0), "Validate takes bytes that are not JSON when the metadata marks them")
	require.Equal(t, "bytes (not JSON), 920 bytes", wire.DescribeEncoded(ev.Metadata, ev.PayloadEncoded, ev.Payload))

	// A payload that happens to be JSON text is still bytes.
	ev, err = model.NewBytesEvent("blob.saved", []byte(`{"a":1}`))
	require.NoError(t, err)
	require.True(t, wire.IsBytes(ev.Metadata))

	for _, tt := range []struct {
		name string
		make func() (*model.Event, error)
		msg  string
	}{
		{"Empty", func() (*model.Event, error) { return model.NewBytesEvent("blob.saved", nil) }, "Payload must not be empty"},
		{"BadName", func() (*model.Event, error) { return model.NewBytesEvent("blob saved", []byte{1}) }, "Name"},
		{"BadOption", func() (*model.Event, error) {
			return model.NewBytesEvent("blob.saved", []byte{1}, model.WithMaxRetry(-1))
		}, "MaxRetry"},
		{"OverTheCeiling", func() (*model.Event, error) {
			return model.NewBytesEvent("blob.saved", make([]byte, wire.MaxPayloadSizeCeiling+1))
		}, "over the limit"},
		{"NewEventWithTheMarker", func() (*model.Event, error) {
			return model.NewEvent("blob.saved", 1, model.WithMetadata(wire.HeaderPayloadFormat, wire.PayloadFormatBytes))
		}, "set by model.NewBytesEvent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.make()
			require.ErrorIs(t, err, model.ErrInvalidEvent)
			require.ErrorContains(t, err, tt.msg)
		})
	}

	// NewEvent is unchanged: a []byte is JSON text, and must be valid JSON.
	_, err = model.NewEvent("blob.saved", binaryPayload())
	require.ErrorIs(t, err, model.ErrInvalidEvent)
	require.ErrorContains(t, err, "not valid JSON")
	ev, err = model.NewEvent("doc.saved", []byte(`{"a":1}`))
	require.NoError(t, err)
	require.False(t, wire.IsBytes(ev.Metadata))
	require.Empty(t, wire.DescribeEncoded(ev.Metadata, ev.PayloadEncoded, ev.Payload))

	// An event built by hand: an unknown format is refused, and bytes without the marker must be JSON.
	bad := &model.Event{EventID: ev.EventID, Name: "x", Queue: "default", Payload: json.RawMessage{0xff},
		Metadata: map[string]string{wire.HeaderPayloadFormat: "text"}}
	require.ErrorContains(t, bad.Validate(0), `Metadata key bunbox-payload-format is "text"`)
	bad.Metadata = nil
	require.ErrorContains(t, bad.Validate(0), "not valid JSON (opaque bytes: model.NewBytesEvent)")
}

// TestCodecBytesEvent: a bytes event's payload encodes and decodes like a JSON one; DecodeEvent turns
// stored bytes that no codec encoded into the payload; DescribeEncoded says "bytes" and the size, never
// the bytes.
func TestCodecBytesEvent(t *testing.T) {
	t.Parallel()
	data := binaryPayload()
	ev, err := model.NewBytesEvent("blob.saved", data)
	require.NoError(t, err)
	c, err := model.NewCodec(model.CompressAbove(16), model.EncryptWith(testKeyring(t, "k1", map[string][]byte{"k1": testKey(1)})))
	require.NoError(t, err)
	enc, encoding, keyID, err := c.Encode(ev.EventID, ev.Payload)
	require.NoError(t, err)
	require.Equal(t, "gzip+aes-gcm", encoding)

	stored := *ev // as the relay reads the row back
	stored.Payload, stored.PayloadEncoded = json.RawMessage("null"), enc
	stored.Metadata = map[string]string{wire.HeaderPayloadFormat: wire.PayloadFormatBytes,
		wire.HeaderPayloadEncoding: encoding, wire.HeaderPayloadKeyID: keyID}
	desc := wire.DescribeEncoded(stored.Metadata, stored.PayloadEncoded, stored.Payload)
	require.Regexp(t, `^bytes \(not JSON\), encrypted \(key id k1\), gzip-compressed, \d+ bytes$`, desc)
	require.NoError(t, c.DecodeEvent(&stored))
	require.Equal(t, data, []byte(stored.Payload))
	require.Equal(t, map[string]string{wire.HeaderPayloadFormat: wire.PayloadFormatBytes}, stored.Metadata,
		"the format is kept: the handler must know the payload is bytes")

	plain := *ev // written without a codec
	plain.Payload, plain.PayloadEncoded = json.RawMessage("null"), data
	require.Equal(t, "bytes (not JSON), 920 bytes", wire.DescribeEncoded(plain.Metadata, plain.PayloadEncoded, plain.Payload))
	var nilCodec *model.Codec
	require.NoError(t, nilCodec.DecodeEvent(&plain))
	require.Equal(t, data, []byte(plain.Payload))
	require.Nil(t, plain.PayloadEncoded)
}
