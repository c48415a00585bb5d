package shop_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(outboxtest.ExamplesRedisDB(m, 10), // its worker serves "default": no other package's tasks there
		// database/sql opens connections in the background for pools the tests close at cleanup.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		// go-redis pools reap idle connections on a timer goroutine that ends shortly after Close.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}
