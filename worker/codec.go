package worker

import (
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// DecodeTask returns t with its payload decoded by c when the relay enqueued it encoded (the task has the
// bunbox-payload-encoding header): a new task of the same type with the plain payload and t's headers
// without bunbox-payload-encoding and bunbox-payload-key-id (bunbox-payload-format, the marker
// of an event of bytes, is kept). A task that is not encoded is returned as it is. The new task has no ResultWriter: a handler that writes results reads the payload with
// DecodeTask and keeps t. A nil c decodes gzip only.
//
// An error names the task type, the event id and the key id, never a key. A key id that c's Keyring does
// not hold (model.ErrUnknownKeyID), or no Codec for an encrypted payload (model.ErrNoCodec), is returned
// as it is, for asynq to retry: the fix is a deploy with the key. Bytes that do not decode
// (model.ErrCorruptPayload) and a task without a valid event id wrap ErrMalformedTask and asynq.SkipRetry,
// and asynq archives the task.
func DecodeTask(c *model.Codec, t *asynq.Task) (*asynq.Task, error) {
	headers := t.Headers()
	encoding, ok := headers[wire.HeaderPayloadEncoding]
	if !ok {
		return t, nil
	}
	id, err := TaskEventID(t)
	if err != nil {
		return nil, err
	}
	keyID := headers[wire.HeaderPayloadKeyID]
	plain, err := c.Decode(id, encoding, keyID, t.Payload())
	switch {
	case err == nil:
		return asynq.NewTaskWithHeaders(t.Type(), plain, wire.WithoutEncodingHeaders(headers)), nil
	case errors.Is(err, model.ErrUnknownKeyID) && (c == nil || c.Keyring() == nil):
		return nil, fmt.Errorf("%s: %w (worker.WithLocation): %w", t.Type(), model.ErrNoCodec, err)
	case errors.Is(err, model.ErrUnknownKeyID):
		return nil, fmt.Errorf("%s: %w", t.Type(), err)
	}
	return nil, fmt.Errorf("%w: %s: %w: %w", ErrMalformedTask, t.Type(), err, asynq.SkipRetry)
}
