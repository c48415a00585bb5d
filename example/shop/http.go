package shop

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/uptrace/bun"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// Handler returns the shop's HTTP API:
//
//	POST /orders   {"customer": "...", "lines": [{"sku": "...", "quantity": 1, "price_cents": 450}]}
//	               201 with the order, 400 for an invalid request, 500 when the database fails
//	GET  /healthz  200 "ok" when the database answers, 503 otherwise
func Handler(db *bun.DB, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var req PlaceOrderRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid JSON: " + err.Error()})
			return
		}
		order, err := PlaceOrder(r.Context(), db, req)
		switch {
		case errors.Is(err, ErrInvalidOrder):
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		case err != nil:
			logger.LogAttrs(r.Context(), slog.LevelError, "place order", slog.String("err", err.Error()))
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "could not place the order"})
		default:
			writeJSON(w, http.StatusCreated, order)
		}
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := db.PingContext(r.Context()); err != nil {
			http.Error(w, "database: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
