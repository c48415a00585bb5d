package relay

import (
	"context"

	"golang.org/x/sync/semaphore"

	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// decodedBudget bounds the payloads the relay holds decoded (Config.Location.Codec) over all its workers. A round
// keeps its rows as stored (BatchBytes counts them so), and each encoded payload is decoded only for its
// enqueue and let go after it (publishDecoded): a compression bomb of 64 KiB stored that decodes to 1 MiB
// takes its 1 MiB only while its task is built and sent.
//
// A decoded payload is charged twice its size: itself, and asynq's task message, a copy of it that lives
// as long as the enqueue. A decode starts only while the decoded payloads in flight are charged at most
// BatchBytes: it reserves the most it may cost (twice the Codec's limit, model.MaxDecodedSize) out of
// BatchBytes + that, and keeps of it what the payload costs. So the decoded payloads and their task
// messages take at most BatchBytes plus twice the Codec's limit at once.
type decodedBudget struct {
	sem     *semaphore.Weighted // nil: no Codec, nothing is decoded
	reserve int64               // twice the Codec's limit: what a decode reserves before it knows the size
}

// newDecodedBudget is the budget of a relay with cfg (withDefaults applied).
func newDecodedBudget(cfg Config) decodedBudget {
	if cfg.Location.Codec == nil {
		return decodedBudget{}
	}
	reserve := 2 * int64(cfg.Location.Codec.DecodedLimit())
	return decodedBudget{sem: semaphore.NewWeighted(cfg.BatchBytes + reserve), reserve: reserve}
}

// decodes reports whether ev's payload is one the relay's Codec decodes: encoded by an Outbox's codec.
// The bytes of a bytes event stored as they are, and encoded payloads passed through without a Codec, take
// no more than their stored bytes.
func (b *decodedBudget) decodes(ev *model.Event) bool {
	if b.sem == nil || ev.PayloadEncoded == nil {
		return false
	}
	_, named := ev.Metadata[wire.HeaderPayloadEncoding]
	return named
}

// publishDecoded publishes ev (publisher.publish) with its payload as its task carries it (deliverer.payload).
// An encoded payload is decoded within the decoded budget, right before its task is built, and ev gets its
// stored payload and metadata back once the enqueue is done, so that the decoded bytes are garbage from
// then on, whatever the round does with its rows after. A payload that does not decode (over the Codec's
// limit among others) is an error wrapping errMalformedRow; errReleased when ctx ends while the decode
// waits for the budget.
func (d *deliverer) publishDecoded(ctx context.Context, p *publisher, ev *model.Event) error {
	if !d.decoded.decodes(ev) {
		if err := d.payload(ev); err != nil {
			return err
		}
		return p.publish(ev)
	}
	b := &d.decoded
	if err := b.sem.Acquire(ctx, b.reserve); err != nil {
		return errReleased
	}
	held := b.reserve
	defer func() { b.sem.Release(held) }()
	stored := *ev
	if err := d.payload(ev); err != nil {
		return err
	}
	defer func() {
		ev.Payload, ev.PayloadEncoded, ev.Metadata = stored.Payload, stored.PayloadEncoded, stored.Metadata
	}()
	if n := 2 * int64(cap(ev.Payload)); n < held { // Decode keeps within the limit (and a buffer's spare room)
		b.sem.Release(held - n)
		held = n
	}
	return p.publish(ev)
}
