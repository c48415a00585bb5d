package ui_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// chromedp's browser process reaper and the pools' connection openers outlive single tests briefly
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}
