package relay

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/internal/store"
	"github.com/bunbox/bunbox/model"
)

// streamCursor is the cursor row as a stream round holds it (store.Cursor).
type streamCursor = store.Cursor

// streamRead is what one read of the stream returned.
type streamRead struct {
	events []model.Event
	bad    map[int]error // rows that cannot become tasks, by index into events
	xids   []string      // each event's xid
	// cancelled holds the rows whose cancel had committed when they were read, by index into events:
	// true for those whose cancel is not settled yet.
	cancelled map[int]bool
	full      bool // more rows of the pair may follow: the read was cut at the limit or the byte budget
}

// read reads up to limit rows of c's pair after c's position (store.Stream.Read), no more than budget
// bytes of payload and metadata unless the first row alone is larger. Each row is read into its place in
// the events (room for limit, the statement's LIMIT, each slot zero: see spareEvents), and checked as
// every read's rows are (rowsRead).
func (sr *streamReader) read(ctx context.Context, tx bun.Tx, c streamCursor, limit int, budget int64) (streamRead, error) {
	rr := rowsRead{events: sr.state.spare.take(limit)}
	res := streamRead{xids: make([]string, 0, limit)}
	events, full, err := sr.st.Read(ctx, tx, c, limit, rr.read(budget), func(i int, row *store.StreamRow) {
		if row.Cancelled {
			if res.cancelled == nil {
				res.cancelled = map[int]bool{}
			}
			res.cancelled[i] = row.Unsettled
		}
		res.xids = append(res.xids, row.Xid)
	})
	if err != nil {
		return streamRead{}, err
	}
	res.events, res.bad, res.full = events, rr.bad, full
	return res, nil
}

// due reports whether a stream round may find rows to deliver in some lane (store.Stream.Due); an error
// says yes, so that the round that follows meets it and backs off. When none has, it looks for a lane
// with streamed rows and no cursor row, and creates it (streamReader.lanes).
func (sr *streamReader) due(ctx context.Context) bool {
	if !sr.streaming(ctx) || sr.state.active.Load() > 0 {
		return false // off, or another worker of this relay is in a stream round (streamState.active)
	}
	order, err := sr.laneOrder(ctx)
	if err != nil || len(order) > 0 {
		return true
	}
	missing, err := sr.st.MissingLanes(ctx, sr.db)
	if err != nil {
		return true
	}
	if missing && !sr.state.noInsertLogged.Load() {
		sr.lanes(ctx, true)
		return true
	}
	return false
}
