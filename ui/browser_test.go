package ui_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/ui"
)

// screenshotDirEnv names where the browser test keeps its screenshots; by default .artifacts/ui at the
// module root (git-ignored).
const screenshotDirEnv = "BUNBOX_UI_SCREENSHOTS"

// chromiumPath finds Debian's chromium (scripts/devservices.sh tools installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	outboxtest.SkipShort(t)
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: scripts/devservices.sh tools installs Debian's chromium package")
	return ""
}

// newBrowser starts a headless Chromium from exe, as the machine's closed network needs it (no background
// networking, no QUIC), with a profile of its own, and returns its context, bounded to 90 s and closed when
// the test ends.
func newBrowser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestBrowserRetryDeadEvent drives the page in a real headless Chromium, mounted on a service's mux under
// /outbox (http.StripPrefix) with a token: the dead list asks for the token, the sign-in returns to it
// under the mount; it loads the overview, selects a dead event and clicks "Retry selected"; the event is
// back in line in the database, the page stayed under /outbox, and it loaded under its
// Content-Security-Policy with nothing blocked. Screenshots of the overview and the dead list are kept in
// BUNBOX_UI_SCREENSHOTS (default .artifacts/ui).
func TestBrowserRetryDeadEvent(t *testing.T) {
	t.Parallel()
	exe := chromiumPath(t)
	f := newFixture(t, ui.Config{Token: testToken})

	ctx := newBrowser(t, exe)

	// run does one step that gives a value, failing the test on an error.
	run := func(what string, err error) {
		t.Helper()
		require.NoError(t, err, what)
	}
	base := f.mounted(t, "/outbox").base + "/outbox"
	run("ask for the token", chromedp.Do(ctx, chromedp.Navigate(base+"/events?state=dead"), chromedp.WaitVisible("#signin-needed")))
	run("sign in", chromedp.Do(ctx,
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Click("#signin"),
		chromedp.WaitVisible("#sel-"+f.dead[0].String()),
	))
	signedIn, err := chromedp.Run(ctx, chromedp.Location())
	run("read the location after the sign-in", err)

	run("load the overview", chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible("#dead")))
	deadCard, err := chromedp.Run(ctx, chromedp.Text("#dead"))
	run("read the dead count", err)
	// the stylesheet loaded under the CSP: the header has its background
	styled, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("header")).backgroundColor`))
	run("read the header's style", err)
	overview, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	run("screenshot the overview", err)

	run("select", chromedp.Do(ctx,
		chromedp.Navigate(base+"/events?state=dead"),
		chromedp.WaitVisible("#sel-"+f.dead[0].String()),
		chromedp.Click("#sel-"+f.dead[0].String()),
	))
	deadList, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	run("screenshot the dead list", err)
	run("retry", chromedp.Do(ctx, chromedp.Click("#retry"), chromedp.WaitVisible("#flash")))
	flash, err := chromedp.Run(ctx, chromedp.Text("#flash"))
	run("read the flash", err)
	retried, err := chromedp.Run(ctx, chromedp.Location())
	run("read the location after the retry", err)

	require.Equal(t, base+"/events?state=dead", signedIn, "the sign-in returns to the page under the mount")
	require.Equal(t, base+"/events?state=dead&done=retried&n=1", retried, "the retry returns under the mount")
	require.Equal(t, "2", strings.TrimSpace(deadCard))
	require.Equal(t, "rgb(246, 248, 250)", styled, "the stylesheet applies")
	require.Equal(t, "Dead events retried: 1.", strings.TrimSpace(flash))
	require.EqualValues(t, 1, f.deadCount(t), "the clicked event is back in line")
	require.Contains(t, f.logText(), "ui: dead events retried")

	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = filepath.Join("..", ".artifacts", "ui")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, png := range map[string][]byte{"overview.png": overview, "dead-selected.png": deadList} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}
	t.Logf("screenshots in %s", dir)
}
