package relay

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

var rowReadID = uuid.MustParse("0192f0a0-0000-7000-8000-000000000001")

func TestReadRow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, event, queue, payload, metadata string
		wantErr                               string
		wantMetadata                          map[string]string
	}{
		{name: "Plain", event: "e", queue: "q", payload: `{}`, metadata: `{}`},
		{name: "Metadata", event: "e", queue: "q", payload: `1`, metadata: `{"a": "1", "b": ""}`, wantMetadata: map[string]string{"a": "1", "b": ""}},
		{name: "NullMetadata", event: "e", queue: "q", payload: `null`, metadata: `null`},
		{name: "MetadataNotAnObject", event: "e", queue: "q", payload: `{}`, metadata: `[1]`, wantErr: "JSON object of strings"},
		{name: "MetadataNumber", event: "e", queue: "q", payload: `{}`, metadata: `{"a": 1}`, wantErr: "JSON object of strings"},
		{name: "MetadataEmpty", event: "e", queue: "q", payload: `{}`, metadata: ``, wantErr: "JSON object of strings"},
		{name: "MetadataEmptyKey", event: "e", queue: "q", payload: `{}`, metadata: `{"": "v"}`, wantErr: "Metadata keys must not be empty"},
		{name: "MetadataNUL", event: "e", queue: "q", payload: `{}`, metadata: `{"k": "\u0000"}`, wantErr: "must not contain NUL"},
		{name: "MetadataColumnTooLong", event: "e", queue: "q", payload: `{}`, metadata: strings.Repeat(" ", maxMetadataColumn+1), wantErr: "column metadata is"},
		{name: "EmptyPayload", event: "e", queue: "q", payload: ``, metadata: `{}`, wantErr: "column payload is empty"},
		{name: "EmptyName", event: "", queue: "q", payload: `{}`, metadata: `{}`, wantErr: "Name must not be empty"},
		{name: "EmptyQueue", event: "e", queue: "", payload: `{}`, metadata: `{}`, wantErr: "Queue must not be empty"},
		{name: "ControlInQueue", event: "e", queue: "q\n", payload: `{}`, metadata: `{}`, wantErr: "must not contain spaces or control characters"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := model.Event{EventID: rowReadID, Name: tt.event, Queue: tt.queue, Payload: json.RawMessage(tt.payload)}
			err := readRow(&ev, []byte(tt.metadata))
			if tt.wantErr != "" {
				require.ErrorIs(t, err, errMalformedRow)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantMetadata, ev.Metadata)
			require.Equal(t, tt.payload, string(ev.Payload), "the payload is kept as it is")
		})
	}

	t.Run("PayloadOverTheCeiling", func(t *testing.T) {
		t.Parallel()
		ev := model.Event{EventID: rowReadID, Name: "e", Queue: "q", Payload: make(json.RawMessage, wire.MaxPayloadSizeCeiling+1)}
		require.ErrorContains(t, readRow(&ev, []byte(`{}`)), "over the limit of 67108864 (wire.MaxPayloadSizeCeiling)")
	})
}

// FuzzReadRow feeds any bytes as the payload and metadata columns (and any name and queue) to readRow:
// it never panics, refuses with errMalformedRow, or gives an event that makes a task carrying the
// metadata, within every metadata limit.
func FuzzReadRow(f *testing.F) {
	f.Add("order.placed", "default", []byte(`{"id":1}`), []byte(`{}`))
	f.Add("order.placed", "default", []byte(`null`), []byte(`{"tenant":"acme","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`))
	f.Add("e", "q", []byte(`{}`), []byte(`{"tenant": 7}`))
	f.Add("e", "q", []byte(``), []byte(`null`))
	f.Add("", "", []byte(`"x"`), []byte(`[]`))
	f.Add("a b", "q", []byte(`1`), []byte(`{"k":"\u0000"}`))
	f.Add("e", "q", []byte(`1`), []byte(`{"":"v"}`))
	f.Add("e", "q", []byte(`1`), []byte(`{"k":"\ud800"}`))
	f.Add("e", "q", []byte(`1`), []byte("{\"k\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, name, queue string, payload, metadata []byte) {
		ev := model.Event{EventID: rowReadID, Name: name, Queue: queue, Payload: payload}
		err := readRow(&ev, metadata)
		if err != nil {
			if !errors.Is(err, errMalformedRow) {
				t.Fatalf("error %v does not wrap errMalformedRow", err)
			}
			return
		}
		if len(ev.Metadata) > wire.MaxMetadataCount {
			t.Fatalf("%d metadata keys passed", len(ev.Metadata))
		}
		checked := ev
		checked.Payload = json.RawMessage("null")
		if err := checked.Validate(0); err != nil {
			t.Fatalf("readRow passed an event that Validate refuses: %v", err)
		}
		task, opts := newTask(&ev, ev.EventID.String(), time.Hour)
		if task.Type() != name || len(opts) == 0 {
			t.Fatalf("task type %q, want %q", task.Type(), name)
		}
		for k, v := range ev.Metadata {
			if k == wire.HeaderEventID || k == wire.HeaderEventName || k == wire.HeaderCreatedAt {
				continue // the relay's own headers win
			}
			if task.Headers()[k] != v {
				t.Fatalf("header %q = %q, want %q", k, task.Headers()[k], v)
			}
		}
	})
}
