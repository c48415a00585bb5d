package shop_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/bunbox/bunbox/example/shop"
	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/relay"
)

func TestPlaceOrderRequestValidate(t *testing.T) {
	t.Parallel()

	line := shop.LineRequest{SKU: "tea", Quantity: 1, PriceCents: 450}
	tests := []struct {
		name    string
		req     shop.PlaceOrderRequest
		wantErr string
	}{
		{"Valid", shop.PlaceOrderRequest{Customer: "ada", Lines: []shop.LineRequest{line}}, ""},
		{"NoCustomer", shop.PlaceOrderRequest{Customer: " ", Lines: []shop.LineRequest{line}}, "customer is empty"},
		{"NoLines", shop.PlaceOrderRequest{Customer: "ada"}, "lines is empty"},
		{"NoSKU", shop.PlaceOrderRequest{Customer: "ada", Lines: []shop.LineRequest{{Quantity: 1}}}, "lines[0].sku is empty"},
		{"ZeroQuantity", shop.PlaceOrderRequest{Customer: "ada", Lines: []shop.LineRequest{line, {SKU: "x"}}}, "lines[1].quantity"},
		{"NegativePrice", shop.PlaceOrderRequest{Customer: "ada", Lines: []shop.LineRequest{{SKU: "x", Quantity: 1, PriceCents: -1}}}, "lines[0].price_cents"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.req.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, shop.ErrInvalidOrder)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

type testBundle struct {
	db    *bun.DB
	queue string
	api   *httptest.Server
}

// setup runs the whole shop on a fresh schema and a queue of its own: the API behind httptest, the relay
// and the worker as goroutines, stopped (and the queue deleted) when the test ends.
func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	db, _ := outboxtest.Schema(t)
	require.NoError(t, shop.Migrate(ctx, db))
	var b [6]byte
	_, _ = rand.Read(b[:])
	queue := "shop_test_" + hex.EncodeToString(b[:])
	shop.Register(db, queue)

	redisOpt := asynq.RedisClientOpt{Addr: outboxtest.RedisAddr()}
	logger := outboxtest.Logger(t)
	r, err := relay.New(db, redisOpt, relay.Config{Logger: logger})
	require.NoError(t, err)

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(runCtx); err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	wg.Go(func() {
		if err := shop.RunWorker(runCtx, redisOpt, db, shop.WorkerConfig{Queue: queue, Logger: logger}); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	api := httptest.NewServer(shop.Handler(db, logger))
	t.Cleanup(func() {
		api.Close()
		stop()
		wg.Wait()
		_ = r.Close()
		in := asynq.NewInspector(redisOpt)
		if err := in.DeleteQueue(queue, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			t.Logf("delete queue %s: %v", queue, err)
		}
		_ = in.Close()
	})
	return &testBundle{db: db, queue: queue, api: api}
}

func postOrder(t *testing.T, url string, body any) (*http.Response, []byte) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(url+"/orders", "application/json", bytes.NewReader(raw))
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	return resp, buf.Bytes()
}

func confirmation(t *testing.T, db bun.IDB, orderID int64) (shop.Confirmation, bool) {
	t.Helper()
	var c shop.Confirmation
	err := db.NewSelect().Model(&c).Where("order_id = ?", orderID).Scan(context.Background())
	if errors.Is(err, sql.ErrNoRows) {
		return c, false
	}
	require.NoError(t, err)
	return c, true
}

func TestShopEndToEnd(t *testing.T) {
	t.Parallel()
	outboxtest.SkipShort(t)
	bundle := setup(t)
	ctx := context.Background()

	t.Run("PlacedOrdersAreConfirmedOnce", func(t *testing.T) {
		var ids []int64
		for i := range 5 {
			resp, body := postOrder(t, bundle.api.URL, shop.PlaceOrderRequest{
				Customer: "ada@example.com",
				Lines: []shop.LineRequest{
					{SKU: "tea", Quantity: i + 1, PriceCents: 450},
					{SKU: "scone", Quantity: 1, PriceCents: 325},
				},
			})
			require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
			var o shop.Order
			require.NoError(t, json.Unmarshal(body, &o))
			require.Positive(t, o.ID)
			require.Equal(t, int64((i+1)*450+325), o.TotalCents)
			ids = append(ids, o.ID)
		}
		outboxtest.WaitFor(t, 30*time.Second, "a confirmation of every placed order", func() bool {
			return outboxtest.Count(t, bundle.db, "confirmations", "order_id IN (?)", bun.List(ids)) == int64(len(ids))
		})
		for _, id := range ids {
			c, ok := confirmation(t, bundle.db, id)
			require.True(t, ok)
			require.Equal(t, 1, c.Deliveries, "order %d", id)
			require.Equal(t, "ada@example.com", c.Customer)
		}
		// The relay marks a row after its enqueue, so a handler can confirm before the mark commits.
		outboxtest.WaitFor(t, 30*time.Second, "every outbox row marked published", func() bool {
			return outboxtest.CountUndelivered(t, bundle.db, "") == 0
		})
	})

	t.Run("RolledBackOrderGetsNoConfirmation", func(t *testing.T) {
		errRollback := errors.New("rollback on purpose")
		var rolledBack int64
		err := bundle.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			o, err := shop.InsertOrder(ctx, tx, shop.PlaceOrderRequest{
				Customer: "mallory@example.com",
				Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 1, PriceCents: 450}},
			})
			require.NoError(t, err)
			rolledBack = o.ID
			return errRollback
		})
		require.ErrorIs(t, err, errRollback)
		require.Positive(t, rolledBack)

		// A later committed order is a barrier: once it is confirmed, the relay has been past the
		// rolled-back one's id for a while.
		later, err := shop.PlaceOrder(ctx, bundle.db, shop.PlaceOrderRequest{
			Customer: "bob@example.com",
			Lines:    []shop.LineRequest{{SKU: "tea", Quantity: 1, PriceCents: 450}},
		})
		require.NoError(t, err)
		outboxtest.WaitFor(t, 30*time.Second, "the confirmation of the later order", func() bool {
			_, ok := confirmation(t, bundle.db, later.ID)
			return ok
		})
		_, ok := confirmation(t, bundle.db, rolledBack)
		require.False(t, ok, "a rolled-back order was confirmed")
		require.Zero(t, outboxtest.Count(t, bundle.db, "orders", "id = ?", rolledBack))
		require.Zero(t, outboxtest.Count(t, bundle.db, "outbox_events", "(payload->>'order_id')::bigint = ?", rolledBack))
	})

	t.Run("InvalidOrderIsRejected", func(t *testing.T) {
		resp, body := postOrder(t, bundle.api.URL, map[string]any{"customer": "ada"})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, string(body), "lines is empty")

		resp, body = postOrder(t, bundle.api.URL, map[string]any{"customer": "ada", "coupon": "FREE"})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, string(body), "invalid JSON")
	})

	t.Run("Healthz", func(t *testing.T) {
		resp, err := http.Get(bundle.api.URL + "/healthz")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})
}
