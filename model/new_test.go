package model_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

func TestNewEvent(t *testing.T) {
	t.Parallel()
	fixed := uuid.MustParse("0192f0a0-0000-7000-8000-000000000001")
	tests := []struct {
		name    string
		event   string
		payload any
		opts    []model.Option
		wantErr string
		check   func(t *testing.T, ev *model.Event)
	}{
		{name: "Defaults", event: "order.placed", payload: map[string]int{"id": 1}, check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, "order.placed", ev.Name)
			require.Equal(t, model.DefaultQueue, ev.Queue)
			require.Equal(t, uuid.Version(7), ev.EventID.Version())
			require.JSONEq(t, `{"id":1}`, string(ev.Payload))
			require.Nil(t, ev.Metadata)
		}},
		{name: "Options", event: "x", payload: nil, opts: []model.Option{
			model.WithQueue("critical"), model.WithEventID(fixed), model.WithMetadata("a", "1"), model.WithMetadata("b", "2"),
		}, check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, "critical", ev.Queue)
			require.Equal(t, fixed, ev.EventID)
			require.Equal(t, map[string]string{"a": "1", "b": "2"}, ev.Metadata)
			require.Equal(t, "null", string(ev.Payload))
		}},
		{name: "RawJSON", event: "x", payload: json.RawMessage(` {"a": [1, 2]} `), check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, `{"a": [1, 2]}`, string(ev.Payload))
		}},
		{name: "Bytes", event: "x", payload: []byte(`"s"`), check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, `"s"`, string(ev.Payload))
		}},
		{name: "EmptyName", event: "", wantErr: "Name must not be empty"},
		{name: "LongName", event: strings.Repeat("a", 256), wantErr: "over the limit of 255"},
		{name: "SpaceInName", event: "order placed", wantErr: "must not contain spaces"},
		{name: "ControlInName", event: "order\x00", wantErr: "must not contain spaces or control characters"},
		{name: "InvalidUTF8", event: "\xff", wantErr: "not valid UTF-8"},
		{name: "Channel", event: "x", payload: make(chan int), wantErr: "unsupported type"},
		{name: "NaN", event: "x", payload: math.Inf(1), wantErr: "unsupported value"},
		{name: "BadRaw", event: "x", payload: json.RawMessage(`{`), wantErr: "not valid JSON"},
		{name: "OverTheCeiling", event: "x", payload: json.RawMessage(`"` + strings.Repeat("x", wire.MaxPayloadSizeCeiling) + `"`), wantErr: "67108866 bytes, over the limit of 67108864"},
		{name: "PayloadNUL", event: "x", payload: json.RawMessage(`{"a":"\u0000"}`), wantErr: `Payload contains \u0000`},
		{name: "PayloadEscapedBackslashIsFine", event: "x", payload: json.RawMessage(`{"a":"\\u0000"}`), check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, `{"a":"\\u0000"}`, string(ev.Payload))
		}},
		{name: "PayloadLoneHighSurrogate", event: "x", payload: json.RawMessage(`"\ud800"`), wantErr: "half a surrogate pair"},
		{name: "PayloadLoneHighSurrogateThenChar", event: "x", payload: json.RawMessage(`"\ud800x"`), wantErr: "half a surrogate pair"},
		{name: "PayloadLoneLowSurrogate", event: "x", payload: json.RawMessage(`"\udc00"`), wantErr: "half a surrogate pair"},
		{name: "PayloadTwoHighSurrogates", event: "x", payload: json.RawMessage(`"\ud800\ud800"`), wantErr: "half a surrogate pair"},
		{name: "PayloadSurrogatePair", event: "x", payload: json.RawMessage(`["\ud83d\ude00", "\u00e9\n"]`), check: func(t *testing.T, ev *model.Event) {
			require.Equal(t, `["\ud83d\ude00", "\u00e9\n"]`, string(ev.Payload))
		}},
		{name: "PayloadInvalidUTF8", event: "x", payload: json.RawMessage("\"\xff\""), wantErr: "Payload is not valid UTF-8"},
		{name: "MetadataKeyTooLong", event: "x", opts: []model.Option{model.WithMetadata(strings.Repeat("k", wire.MaxMetadataKeyLength+1), "v")}, wantErr: "is 129 bytes, over the limit of 128 (MaxMetadataKeyLength)"},
		{name: "MetadataValueTooLong", event: "x", opts: []model.Option{model.WithMetadata("k", strings.Repeat("v", wire.MaxMetadataValueLength+1))}, wantErr: "is 4097 bytes, over the limit of 4096 (MaxMetadataValueLength)"},
		{name: "MetadataTooMany", event: "x", opts: manyMetadata(wire.MaxMetadataCount+1, 1), wantErr: "Metadata has 33 keys, over the limit of 32 (MaxMetadataCount)"},
		{name: "MetadataTooBig", event: "x", opts: manyMetadata(5, wire.MaxMetadataValueLength), wantErr: "over the limit of 16384 (MaxMetadataSize)"},
		{name: "MetadataAtTheLimits", event: "x", opts: manyMetadata(4, wire.MaxMetadataValueLength-3), check: func(t *testing.T, ev *model.Event) {
			require.Len(t, ev.Metadata, 4)
		}},
		{name: "MetadataNUL", event: "x", opts: []model.Option{model.WithMetadata("k", "a\x00b")}, wantErr: "must not contain NUL"},
		{name: "MetadataInvalidUTF8", event: "x", opts: []model.Option{model.WithMetadata("k\xff", "v")}, wantErr: "must be valid UTF-8"},
		{name: "EmptyQueue", event: "x", opts: []model.Option{model.WithQueue("")}, wantErr: "Queue must not be empty"},
		{name: "NilEventID", event: "x", opts: []model.Option{model.WithEventID(uuid.Nil)}, wantErr: "EventID must not be the nil UUID"},
		{name: "EmptyMetadataKey", event: "x", opts: []model.Option{model.WithMetadata("", "v")}, wantErr: "Metadata keys must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := model.NewEvent(tt.event, tt.payload, tt.opts...)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, model.ErrInvalidEvent)
				require.ErrorContains(t, err, tt.wantErr)
				require.Nil(t, ev)
				return
			}
			require.NoError(t, err)
			tt.check(t, ev)
		})
	}
}

// manyMetadata gives n metadata options, keys "k00".."kNN", each value of size bytes.
func manyMetadata(n, size int) []model.Option {
	opts := make([]model.Option, n)
	for i := range n {
		opts[i] = model.WithMetadata(fmt.Sprintf("k%02d", i), strings.Repeat("v", size))
	}
	return opts
}

func TestEventIDsAreUnique(t *testing.T) {
	t.Parallel()
	seen := map[uuid.UUID]bool{}
	for range 1000 {
		ev, err := model.NewEvent("x", nil)
		require.NoError(t, err)
		require.False(t, seen[ev.EventID])
		seen[ev.EventID] = true
	}
}

func TestValidateNil(t *testing.T) {
	t.Parallel()
	var ev *model.Event
	require.ErrorIs(t, ev.Validate(0), model.ErrInvalidEvent)
}
