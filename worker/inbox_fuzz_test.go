package worker

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/wire"
)

// FuzzInboxTask feeds any event-id header (or none) and any payload to what the inbox reads of a task:
// EventID and the JSON decoding of HandleJSON. Neither panics; a refusal wraps ErrMalformedTask and
// asynq.SkipRetry (so asynq archives the task rather than retrying it forever); an accepted id is the
// header's and is not the nil UUID.
func FuzzInboxTask(f *testing.F) {
	f.Add(true, "0192f0a0-0000-7000-8000-000000000001", []byte(`{"order_id":42,"tags":["a"]}`))
	f.Add(true, "00000000-0000-0000-0000-000000000000", []byte(`null`))
	f.Add(true, "{0192f0a0-0000-7000-8000-000000000001}", []byte(`{"order_id":"42"}`))
	f.Add(true, "urn:uuid:0192f0a0-0000-7000-8000-000000000001", []byte(`[]`))
	f.Add(true, "0192f0a000007000800000000000000 1", []byte(`{"order_id":1e400}`))
	f.Add(false, "", []byte(``))
	f.Add(true, "\xff", []byte("{\"tags\":[\"\xff\"]}"))
	f.Fuzz(func(t *testing.T, hasHeader bool, header string, payload []byte) {
		headers := map[string]string{}
		if hasHeader {
			headers[wire.HeaderEventID] = header
		}
		task := asynq.NewTaskWithHeaders("order.placed", payload, headers)
		id, err := TaskEventID(task)
		if err != nil {
			requireMalformed(t, err)
		} else {
			want, perr := uuid.Parse(header)
			if !hasHeader || perr != nil || id != want || id == uuid.Nil {
				t.Fatalf("EventID(%q) = %s, accepted", header, id)
			}
		}
		type orderPlaced struct {
			OrderID int64    `json:"order_id"`
			Tags    []string `json:"tags"`
		}
		p, err := decodePayload[orderPlaced](task)
		if err != nil {
			requireMalformed(t, err)
		} else if p == nil {
			t.Fatal("decodePayload gave neither a value nor an error")
		}
	})
}

func requireMalformed(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrMalformedTask) || !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("error %v wraps neither ErrMalformedTask nor asynq.SkipRetry", err)
	}
}
