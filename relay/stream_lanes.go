package relay

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
)

// The stream's lanes (internal/store/lanes.go): a lane is a queue and a slice of it, with its own cursor
// row, and a stream round works one lane, whose row it locks with FOR UPDATE SKIP LOCKED: relays, and
// the workers of a relay, stream different lanes at once, never one row twice, and a lane held by a relay
// that died or was cut off is free again when the server ends its transaction (the session bounds).
//
// A round asks which lanes have rows due (one statement for all of them, store.Stream.Due) and locks the
// first one free in the relay's order: with Config.Queues the named queues' lanes by weight (with
// StrictPriority highest first; otherwise the queue that goes first turns in proportion to the weights),
// the other queues' lanes after them; without Queues every lane in turn. Within a queue the slices take
// turns. A relay creates the cursor rows of the lanes that have streamed rows and none (as copies of the
// base row) when it reads the catalog, about once per streamCheckInterval, and when it finds such a lane
// while idle.

// streamSlices is how many slices the migration's default spreads new rows over (stream_slice is
// floor(random() * 4)): a relay creates their lanes for the default queue and the named queues at once.
const streamSlices = 4

// laneOrder returns the names of the lanes with rows due, in the order the relay takes them.
func (sr *streamReader) laneOrder(ctx context.Context) ([]string, error) {
	cs, due, err := sr.st.LanesDue(ctx, sr.db)
	if err != nil {
		return nil, err
	}
	var ready []store.Cursor
	for i, c := range cs {
		if due[i] {
			ready = append(ready, c)
		}
	}
	return orderLanes(ready, sr.queues, sr.state.turn.Add(1)), nil
}

// dueLanes returns the lanes with rows due in the relay's order (laneOrder); when none is, it looks for
// a lane with streamed rows and no cursor row yet (a queue new to the stream), creates it and looks again.
func (sr *streamReader) dueLanes(ctx context.Context) ([]string, error) {
	order, err := sr.laneOrder(ctx)
	if err != nil || len(order) > 0 {
		return order, err
	}
	missing, err := sr.st.MissingLanes(ctx, sr.db)
	if err != nil || !missing {
		return nil, err
	}
	sr.lanes(ctx, true)
	return sr.laneOrder(ctx)
}

// orderLanes orders the lanes cs for the round number turn (see the top of the file).
func orderLanes(cs []store.Cursor, fq *fairQueues, turn uint64) []string {
	weight := func(queue string) int { return 1 } // without Queues, every lane alike
	if fq != nil {
		weight = func(queue string) int {
			for _, s := range fq.named {
				if s.queues[0] == queue {
					return s.weight + 1 // above the queues not named
				}
			}
			if fq.strict {
				return 0
			}
			return 1
		}
	}
	// The queues, by weight (then by name), and the lanes of each, the slices in turn.
	byQueue := map[string][]string{}
	var queues []string
	for _, c := range cs {
		if _, ok := byQueue[c.Queue]; !ok {
			queues = append(queues, c.Queue)
		}
		byQueue[c.Queue] = append(byQueue[c.Queue], c.Name)
	}
	slices.SortFunc(queues, func(a, b string) int { return cmp.Or(cmp.Compare(weight(b), weight(a)), strings.Compare(a, b)) })
	if len(queues) == 0 {
		return nil
	}
	first := 0
	switch {
	case fq == nil:
		first = int(turn % uint64(len(queues)))
	case !fq.strict:
		// The queue that goes first, in proportion to the weights.
		total := 0
		for _, q := range queues {
			total += weight(q)
		}
		slot := int(turn % uint64(total))
		for i, q := range queues {
			if slot -= weight(q); slot < 0 {
				first = i
				break
			}
		}
	}
	order := make([]string, 0, len(cs))
	for i := range queues {
		lanes := byQueue[queues[(first+i)%len(queues)]]
		k := int(turn % uint64(len(lanes)))
		order = append(order, lanes[k:]...)
		order = append(order, lanes[:k]...)
	}
	return order
}

// addLanes creates the cursor rows of the lanes that need one (store.Stream.AddLanes): the lanes with
// streamed rows, and those of the default queue and the named ones, with streamSlices slices. It locks
// the base row (SKIP LOCKED: when another relay holds it, that relay does it) and checks its cluster
// first, starting every cursor anew on another cluster (stream_cluster.go).
func (sr *streamReader) addLanes(ctx context.Context) error {
	tx, err := beginBounded(ctx, sr.db, sr.cfg.bounds())
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	base, ok, err := sr.st.LockCursor(ctx, tx, false)
	if err != nil || !ok {
		return err
	}
	if moved, err := sr.cluster(ctx, tx, base); moved || err != nil {
		return err
	}
	snap, err := sr.st.CurrentSnapshot(ctx, tx)
	if err != nil {
		return err
	}
	lanes, moves, err := sr.st.MayAddLanes(ctx, tx)
	if err != nil {
		return err
	}
	if !lanes || !moves {
		return sr.handOverUnlaned(ctx, tx, snap, moves)
	}
	queues := []string{"default"}
	if sr.queues != nil {
		queues = append(queues, sr.queues.names...)
	}
	if _, err := sr.st.AddLanes(ctx, tx, snap, queues, streamSlices); err != nil {
		return err
	}
	return tx.Commit()
}

// handOverUnlaned is addLanes for a role that may not create cursor rows (no INSERT on bunbox_stream, the
// grant of a release before the lanes) or move cursors (moves false: no INSERT on
// bunbox_stream_positions): the rows waiting in a lane with no cursor row go to the per-row path, which
// delivers each once (store.Stream.HandOverUnlaned), and the relay says so at Warn, once, naming the
// GRANT (and again each time it hands rows over). The rounds of the lanes that have cursor rows fail
// without the grant on bunbox_stream_positions, each naming the table.
func (sr *streamReader) handOverUnlaned(ctx context.Context, tx bun.Tx, snap string, moves bool) error {
	n, err := sr.st.HandOverUnlaned(ctx, tx, snap, cancelNeverPublished, moves)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return err
	}
	if sr.state.noInsertLogged.CompareAndSwap(false, true) || n > 0 {
		sr.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: the relay's role may not create the stream's lanes "+
			"(GRANT SELECT, INSERT, UPDATE ON "+sr.names.Stream()+" and GRANT SELECT, INSERT ON "+
			sr.names.Qualify("bunbox_stream_positions")+" TO the relay's role): the streamed rows of a "+
			"lane with no cursor row go to the per-row path, delivered once there, with an UPDATE each",
			slog.String("table", sr.names.Outbox()), slog.Int64("handed_over", n))
	}
	return nil
}

// lanes creates the lanes' cursor rows when the catalog was read (once per streamCheckInterval) or when
// missing, on an idle relay's look, found a lane with streamed rows and no cursor row. A failure is
// logged at Warn: the rows of such a lane wait for the next try. Then it rotates the cursors' positions
// when they are many (stream_positions.go).
func (sr *streamReader) lanes(ctx context.Context, missing bool) {
	s := sr.state
	if missing && s.noInsertLogged.Load() {
		missing = false // no lane can be created: hand its rows over at the relay's pace, not at each look
	}
	if at := s.lanesAt.Load(); !missing && at != 0 && time.Since(time.Unix(0, at)) < streamCheckInterval {
		return
	}
	s.lanesAt.Store(time.Now().UnixNano())
	if err := sr.addLanes(ctx); err != nil && ctx.Err() == nil {
		sr.log.LogAttrs(ctx, slog.LevelWarn, "bunbox relay: create the stream's lanes", slog.Any("err", err),
			slog.String("table", sr.names.Outbox()))
	}
	sr.rotate(ctx)
}
