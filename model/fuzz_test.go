package model_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// FuzzNewEvent builds events from any name, queue, raw payload and metadata pair: NewEvent never panics,
// refuses with ErrInvalidEvent, or gives an event that Validate accepts, whose payload is the input's JSON.
func FuzzNewEvent(f *testing.F) {
	f.Add("order.placed", "default", []byte(`{"id":1}`), "tenant", "acme")
	f.Add("", "default", []byte(`{`), "k", "v")
	f.Add("a b", "critical", []byte(`null`), "", "v")
	f.Add("x", "", []byte(` {"a": [1, 2]} `), "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	f.Add("x", "q", []byte(`"\u0000"`), "k", "a\x00b")
	f.Add("x", "q", []byte(`"\ud800"`), "k\xff", "v")
	f.Add("x", "q", []byte(`["\ud83d\ude00"]`), strings.Repeat("k", 129), strings.Repeat("v", 4097))
	f.Add("\xff", "q\n", []byte("\"\xff\""), "k", "v")
	f.Fuzz(func(t *testing.T, name, queue string, raw []byte, key, value string) {
		ev, err := model.NewEvent(name, json.RawMessage(raw), model.WithQueue(queue), model.WithMetadata(key, value))
		if err != nil {
			requireInvalid(t, err)
			return
		}
		if err := ev.Validate(wire.MaxPayloadSizeCeiling); err != nil {
			t.Fatalf("NewEvent gave an event that Validate refuses: %v", err)
		}
		if !bytes.Equal(ev.Payload, bytes.TrimSpace(raw)) {
			t.Fatalf("payload %q, want %q", ev.Payload, bytes.TrimSpace(raw))
		}
		if ev.Name != name || ev.Queue != queue || ev.Metadata[key] != value || ev.EventID == uuid.Nil {
			t.Fatalf("event %+v does not carry its input", ev)
		}
	})
}

// FuzzValidate checks events built by hand, as Record receives them, with any bytes as the payload and
// metadata pairs parsed from "key=value" lines: Validate never panics, refuses with ErrInvalidEvent, or
// accepts an event within every limit, whose payload is valid JSON that decodes without NUL.
func FuzzValidate(f *testing.F) {
	f.Add("order.placed", "default", []byte(`{"id":1}`), "tenant=acme\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", 0)
	f.Add("x", "q", []byte(``), "", 0)
	f.Add("x", "q", []byte(`{"a":"\u0000"}`), "=v", 50)
	f.Add("x", "q", []byte(`"\\u0000"`), "k=\x00", 1<<20)
	f.Add("x", "q", []byte(`{"k":"\udbff\udfff"}`), "k=\xff", -1)
	f.Add("x", "q", []byte(strings.Repeat("[", 100)+strings.Repeat("]", 100)), strings.Repeat("k=v\n", 40), 10)
	f.Fuzz(func(t *testing.T, name, queue string, payload []byte, metadata string, maxPayload int) {
		ev := &model.Event{EventID: uuid.MustParse("0192f0a0-0000-7000-8000-000000000001"), Name: name, Queue: queue, Payload: payload}
		for line := range strings.SplitSeq(metadata, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				if ev.Metadata == nil {
					ev.Metadata = map[string]string{}
				}
				ev.Metadata[k] = v
			}
		}
		err := ev.Validate(maxPayload)
		if err != nil {
			requireInvalid(t, err)
			return
		}
		limit := maxPayload
		if limit <= 0 {
			limit = wire.DefaultMaxPayloadSize
		}
		if len(payload) == 0 || len(payload) > min(limit, wire.MaxPayloadSizeCeiling) || !json.Valid(payload) || !utf8.Valid(payload) {
			t.Fatalf("Validate accepted payload %q (limit %d)", payload, limit)
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber() // 1e700 is valid JSON (and jsonb) but no float64
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("accepted payload does not decode: %v", err)
		}
		if hasNUL(v) {
			t.Fatalf("accepted payload %q decodes with a NUL", payload)
		}
		total := 0
		for k, v := range ev.Metadata {
			total += len(k) + len(v)
			if k == "" || len(k) > wire.MaxMetadataKeyLength || len(v) > wire.MaxMetadataValueLength ||
				!utf8.ValidString(k) || !utf8.ValidString(v) || strings.ContainsRune(k+v, 0) {
				t.Fatalf("Validate accepted metadata %q=%q", k, v)
			}
		}
		if len(ev.Metadata) > wire.MaxMetadataCount || total > wire.MaxMetadataSize {
			t.Fatalf("Validate accepted %d metadata keys of %d bytes", len(ev.Metadata), total)
		}
	})
}

func requireInvalid(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, model.ErrInvalidEvent) {
		t.Fatalf("error %v does not wrap ErrInvalidEvent", err)
	}
}

// hasNUL reports whether a decoded JSON value has a NUL in a string or a key.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || hasNUL(e) {
				return true
			}
		}
	}
	return false
}
