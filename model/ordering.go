package model

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxOrderingKeyLength is the longest ordering key, in bytes.
const maxOrderingKeyLength = 255

// WithOrderingKey puts the event in the ordered sequence of key, for example an account or order id: the
// events of one key are handled one at a time, in the order of their outbox ids, by plain asynq handlers.
// The relay hands event n+1 of a key to asynq only after the task of event n completed; events without a
// key are never held back by keyed ones. A dead event (or one whose task asynq archived) blocks its key
// until it is retried.
//
// The outbox id order is the commit order for transactions that serialize on the aggregate the key names
// (they lock or update its row before they record the event): give such transactions' events the key.
// The key must not be empty, is at most maxOrderingKeyLength bytes of UTF-8 and holds no control
// characters; it cannot be combined with WithGroup. See the relay package for what ordering costs.
func WithOrderingKey(key string) Option {
	return func(o *options) { o.orderingKey, o.orderingKeySet = key, true }
}

// checkOrderingKey validates the OrderingKey of e (empty means none).
func checkOrderingKey(e *Event) error {
	k := e.OrderingKey
	switch {
	case k == "":
		return nil
	case len(k) > maxOrderingKeyLength:
		return fmt.Errorf("%w %q: OrderingKey %.40q... is %d bytes, over the limit of %d", ErrInvalidEvent, e.Name, k, len(k), maxOrderingKeyLength)
	case !utf8.ValidString(k):
		return fmt.Errorf("%w %q: OrderingKey %q is not valid UTF-8", ErrInvalidEvent, e.Name, k)
	case strings.IndexFunc(k, unicode.IsControl) >= 0:
		return fmt.Errorf("%w %q: OrderingKey %q must not contain control characters", ErrInvalidEvent, e.Name, k)
	case e.Group != "":
		// asynq deletes the tasks it aggregates: the relay could not see a keyed task complete.
		return fmt.Errorf("%w %q: WithOrderingKey and WithGroup cannot be combined (asynq's aggregation removes the task whose completion releases the key)", ErrInvalidEvent, e.Name)
	}
	return nil
}
