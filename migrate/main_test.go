package migrate_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(outboxtest.Examples(m))
}
