package bunboxtest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(outboxtest.Examples(m),
		// database/sql opens connections in the background for pools the tests close at cleanup.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}
