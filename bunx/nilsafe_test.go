package bunx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/bunx"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/internal/wire"
	"github.com/bunbox/bunbox/model"
)

// Nil loggers and nil options are defaults, not panics; nil receivers give errors.
func TestNilOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OutboxNilOption", func(t *testing.T) {
		t.Parallel()
		db := outboxtest.Unconnected(t)
		ob := bunx.New(db, nil)
		require.NoError(t, ob.Record(ctx, db), "no events: nothing to write")
	})

	t.Run("NilOutbox", func(t *testing.T) {
		t.Parallel()
		var ob *bunx.Outbox
		ev, err := model.NewEvent("x", nil)
		require.NoError(t, err)
		require.ErrorContains(t, ob.Record(ctx, outboxtest.Unconnected(t), ev), "nil Outbox")
		require.ErrorContains(t, ob.Dispatch(ctx, ev), "nil Outbox")
	})

	t.Run("TransactorNilOption", func(t *testing.T) {
		t.Parallel()
		require.NotNil(t, bunx.NewTransactor(outboxtest.Unconnected(t), nil))
	})

	t.Run("NewEventNilOption", func(t *testing.T) {
		t.Parallel()
		ev, err := model.NewEvent("x", nil, nil, model.WithQueue("q"))
		require.NoError(t, err)
		require.Equal(t, "q", ev.Queue)
	})
}

// The payload limit is one setting, the Outbox's: NewEvent accepts what the Outbox decides about.
func TestOnePayloadLimit(t *testing.T) {
	t.Parallel()
	big, err := model.NewEvent("big", json.RawMessage(`"`+strings.Repeat("x", 2<<20)+`"`))
	require.NoError(t, err, "NewEvent checks the ceiling only")
	for _, tt := range []struct {
		name  string
		opts  []bunx.Option
		limit int
	}{
		{"Default", nil, wire.DefaultMaxPayloadSize},
		{"ZeroKeepsTheDefault", []bunx.Option{bunx.WithMaxPayloadSize(0)}, wire.DefaultMaxPayloadSize},
		{"Raised", []bunx.Option{bunx.WithMaxPayloadSize(4 << 20)}, 4 << 20},
		{"AboveTheCeiling", []bunx.Option{bunx.WithMaxPayloadSize(1 << 30)}, wire.MaxPayloadSizeCeiling},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := outboxtest.Unconnected(t)
			ob := bunx.New(db, tt.opts...)
			ev := &model.Event{EventID: big.EventID, Name: "big", Payload: make(json.RawMessage, tt.limit+1)}
			err := ob.Record(context.Background(), db, ev)
			require.ErrorIs(t, err, model.ErrInvalidEvent)
			require.ErrorContains(t, err, fmt.Sprintf("%d bytes, over the limit of %d (the payload limit: bunx.WithMaxPayloadSize)", tt.limit+1, tt.limit))
		})
	}
}
