package model_test

import (
	"fmt"

	"github.com/bunbox/bunbox/model"
)

// Events of one account, recorded by transactions that lock the account's row first, are handled one at
// a time and in commit order.
func ExampleWithOrderingKey() {
	ev, err := model.NewEvent("account.changed", map[string]int64{"balance": 120}, model.WithOrderingKey("account:42"))
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.OrderingKey)

	_, err = model.NewEvent("account.changed", nil, model.WithOrderingKey(""))
	fmt.Println(err)
	// Output:
	// account:42
	// model: invalid event "account.changed": OrderingKey must not be empty (leave WithOrderingKey out for no key)
}
