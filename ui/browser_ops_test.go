package ui_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
	"github.com/bunbox/bunbox/model"
	"github.com/bunbox/bunbox/relay"
	"github.com/bunbox/bunbox/ui"
)

// TestBrowserOperatorPage drives what an operator does in a real headless Chromium, the page mounted under
// /outbox with a token and Redis: sign in, search an id only asynq holds (its task's state), search an
// event's id (its page), follow a task link of the overview to the event's page and run its archived
// task from there, see the stream's lane on the overview and the history's charts drawn under the CSP.
// Screenshots (search.png, event-task.png, stream.png, chart.png) are kept in BUNBOX_UI_SCREENSHOTS
// (default .artifacts/ui; docs/ui holds the committed ones).
func TestBrowserOperatorPage(t *testing.T) {
	t.Parallel()
	exe := chromiumPath(t)
	f := newFixture(t, ui.Config{Token: testToken, Redis: testRedis()})
	queue := outboxtest.RandomName("browser")
	ev, orphan := f.publishedEvent(t, queue), uuid.New()
	failTasks(t, queue, 0, "", ev, orphan) // orphan: a task whose row the retention deleted
	for _, ago := range []int{70, 50, 40, 30, 20, 10} {
		_, err := f.db.ExecContext(t.Context(), `INSERT INTO outbox_events (event_id, event_name, queue, payload, created_at, published_at)
SELECT gen_random_uuid(), 'order.placed', 'default', '{}', now() - ? * interval '1 minute' - i * interval '40 ms', now() - ? * interval '1 minute'
FROM generate_series(1, ?) i`, ago, ago, ago/5)
		require.NoError(t, err)
	}
	require.NoError(t, relay.EnableStream(t.Context(), f.db, model.Location{}))
	f.insertStreamRow(t, "stream.delivered", "NULL")
	outboxtest.DeliverStream(t, f.db)
	f.insertStreamRow(t, "stream.waiting", "NULL")

	ctx := newBrowser(t, exe)
	run := func(what string, err error) {
		t.Helper()
		require.NoError(t, err, what)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(sel))
		run("read "+sel, err)
		return strings.TrimSpace(s)
	}
	location := func() string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Location())
		run("read the location", err)
		return s
	}
	shots := map[string][]byte{}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		run("screenshot "+name, err)
		shots[name] = png
	}
	base := f.mounted(t, "/outbox").base + "/outbox"

	run("sign in", chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible("#signin-needed"),
		chromedp.SendKeys(`input[name="token"]`, testToken), chromedp.Click("#signin"), chromedp.WaitVisible("#stream")))

	run("search an id only asynq holds", chromedp.Do(ctx, chromedp.SendKeys("#q", orphan.String()), chromedp.Click("#search"),
		chromedp.WaitVisible("#search-tasks")))
	require.Contains(t, text("#search-note"), "asynq holds a task with this id")
	require.Equal(t, "archived", text("#search-tasks td.state"))
	shot("search.png")

	run("search an event's id", chromedp.Do(ctx, chromedp.Navigate(base+"/events?state=pending"), chromedp.WaitVisible("#q"), chromedp.SendKeys("#q", ev.String()),
		chromedp.Click("#search"), chromedp.WaitVisible("#task-state")))
	require.Equal(t, base+"/event?id="+ev.String(), location(), "the search opens the event's page under the mount")

	run("follow the task link", chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible("#stream"),
		chromedp.Click(`a.task-link[href="./event?id=`+ev.String()+`"]`), chromedp.WaitVisible("#task-state")))
	require.Equal(t, base+"/event?id="+ev.String(), location())
	require.Equal(t, "archived", text("#task-state"))
	shot("event-task.png")
	run("run the task", chromedp.Do(ctx, chromedp.Click("#task-run"), chromedp.WaitVisible("#flash")))
	require.Equal(t, "asynq tasks put back in line (asynq runs them next): 1.", text("#flash"))
	require.Equal(t, "pending", text("#task-state"))
	require.Equal(t, base+"/event?id="+ev.String()+"&done=tasks-run&n=1&gone=0", location(), "back to the event's page under the mount")

	run("the overview's stream lane", chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible("#stream")))
	require.Equal(t, "on", text("#stream-on"))
	require.Equal(t, "1", text("#stream-waiting"))
	shot("stream.png")

	run("the history", chromedp.Do(ctx, chromedp.Navigate(base+"/history?hours=3"), chromedp.WaitVisible("svg.chart")))
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.chart polyline").length`))
	run("count the lines", err)
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelector("polyline.s-published").getBBox().height`))
	run("measure the published line", err)
	stroke, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("polyline.s-dead")).stroke`))
	run("read the dead line's stroke", err)
	shot("chart.png")
	require.Equal(t, 5, lines)
	require.Greater(t, drawn, 10.0, "the published line rises and falls: drawn, not blocked")
	require.Equal(t, "rgb(180, 35, 24)", stroke, "the presentation attribute applies under the CSP")
	require.Equal(t, "45", text("#total-published"), "44 rows and the event whose task ran")

	dir := os.Getenv(screenshotDirEnv)
	if dir == "" {
		dir = filepath.Join("..", ".artifacts", "ui")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, png := range shots {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}
	t.Logf("screenshots in %s", dir)
}
