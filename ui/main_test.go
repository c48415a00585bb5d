package ui_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(outboxtest.Examples(m),
		// chromedp's browser process reaper and the pools' connection openers outlive single tests briefly
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}
