package model_test

import (
	"testing"

	"github.com/bunbox/bunbox/model"
)

type benchPayload struct {
	OrderID int64  `json:"order_id"`
	Ref     string `json:"ref"`
}

// BenchmarkNewEvent and BenchmarkValidate time the producer's side of an event with no server:
//
//	go test -run '^$' -bench 'NewEvent|Validate' -benchmem ./model/
func BenchmarkNewEvent(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := model.NewEvent("order.placed", benchPayload{OrderID: 12345, Ref: "r12345"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	ev, err := model.NewEvent("order.placed", benchPayload{OrderID: 12345, Ref: "r12345"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := ev.Validate(0); err != nil {
			b.Fatal(err)
		}
	}
}
