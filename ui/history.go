package ui

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bunbox/bunbox/internal/streamsql"
)

// The history's window: the last hours of the outbox, in minutes.
const (
	historyHoursDefault = 6
	historyHoursMax     = 48
)

// historySQL reads, in one statement, per minute of the window since ?: the per-row path's rows by
// published_at (count, p50 and max of published_at - created_at), through
// outbox_events_published_at_idx; the dead rows by dead_at, through outbox_events_dead_idx; and, only when
// the stream has a cursor, the streamed rows the cursor delivered, by the minute of their commit
// (created_at: the stream keeps no time per row), through outbox_events_stream_idx.
const historySQL = `SELECT x.kind, x.m, x.n, x.p50, x.mx FROM (
  SELECT 'published' AS kind, date_trunc('minute', e.published_at) AS m, count(*) AS n,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM e.published_at - e.created_at))::float8 AS p50,
    max(extract(epoch FROM e.published_at - e.created_at))::float8 AS mx
  FROM outbox_events e WHERE e.published_at >= ?0 AND e.published_at < 'infinity' GROUP BY 2
  UNION ALL
  SELECT 'dead', date_trunc('minute', e.dead_at), count(*), 0, 0
  FROM outbox_events e WHERE e.dead_at >= ?0 GROUP BY 2
  UNION ALL
  SELECT 'streamed', date_trunc('minute', e.created_at), count(*), 0, 0
  FROM outbox_events e ` + streamsql.Cursor + `
  WHERE EXISTS (SELECT 1 FROM bunbox_stream WHERE name = 'outbox') AND e.published_at = 'infinity'
    AND e.created_at >= ?0 AND ` + streamsql.Delivered + ` GROUP BY 2
) AS x ORDER BY x.m`

// minute is one minute of the history.
type minute struct {
	Published, Streamed, Dead int64
	LagP50, LagMax            float64 // seconds, of the per-row rows published in the minute
}

// history is what the history page shows: the minutes of the window, oldest first, and the charts
// drawn from them.
type history struct {
	Hours   int
	Since   time.Time
	Minutes []minute
	Total   minute // sums; LagMax the window's maximum
	Counts  chart
	Lag     chart
}

// parseHours reads ?hours=: 1 to 48, 6 when absent.
func parseHours(s string) (int, error) {
	if s == "" {
		return historyHoursDefault, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > historyHoursMax {
		return 0, fmt.Errorf("hours must be a whole number of hours from 1 to %d", historyHoursMax)
	}
	return n, nil
}

func (h *Handler) readHistory(ctx context.Context, hours int) (*history, error) {
	var now time.Time
	if err := h.db.NewRaw("SELECT date_trunc('minute', clock_timestamp())").Scan(ctx, &now); err != nil {
		return nil, err
	}
	hs := &history{Hours: hours, Since: now.Add(-time.Duration(hours) * time.Hour), Minutes: make([]minute, hours*60+1)}
	rows, err := h.db.QueryContext(ctx, h.names.SQL(historySQL), hs.Since)
	if err != nil {
		return nil, fmt.Errorf("read the history: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var m time.Time
		var n int64
		var p50, mx float64
		if err := rows.Scan(&kind, &m, &n, &p50, &mx); err != nil {
			return nil, fmt.Errorf("read the history: %w", err)
		}
		i := int(m.Sub(hs.Since) / time.Minute)
		if i < 0 || i >= len(hs.Minutes) {
			continue // a row of the minute being read
		}
		switch kind {
		case "published":
			hs.Minutes[i].Published, hs.Minutes[i].LagP50, hs.Minutes[i].LagMax = n, p50, mx
		case "dead":
			hs.Minutes[i].Dead = n
		case "streamed":
			hs.Minutes[i].Streamed = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the history: %w", err)
	}
	for _, m := range hs.Minutes {
		hs.Total.Published += m.Published
		hs.Total.Streamed += m.Streamed
		hs.Total.Dead += m.Dead
		hs.Total.LagMax = max(hs.Total.LagMax, m.LagMax)
	}
	hs.draw()
	return hs, nil
}

func (h *Handler) serveHistory(w http.ResponseWriter, r *http.Request) {
	hours, err := parseHours(r.URL.Query().Get("hours"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	hs, err := h.readHistory(ctx, hours)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	h.render(w, "history.html", h.page(r, "History: the last "+strconv.Itoa(hours)+" hours", hs))
}

// The charts' drawing area, in SVG user units.
const (
	chartWidth  = 960
	chartHeight = 160
	chartLeft   = 56 // room for the axis labels
	chartBottom = 20
)

// chart is one server-rendered SVG chart: series of points, an axis scale and time labels.
type chart struct {
	Width, Height  int
	X0, X1, Y0, Y1 int // the plot's left, right, top and bottom
	Series         []series
	Top            string // the value at the top of the axis
	Ticks          []tick
}

// series is one line of a chart: its points as SVG wants them ("x,y x,y …", numbers only).
type series struct {
	Name, Class, Points string
}

// tick is a time label on the x axis.
type tick struct {
	X     float64
	Label string
}

// draw turns the minutes into the two charts.
func (hs *history) draw() {
	pick := func(f func(minute) float64) []float64 {
		v := make([]float64, len(hs.Minutes))
		for i, m := range hs.Minutes {
			v[i] = f(m)
		}
		return v
	}
	hs.Counts = hs.newChart([]string{"published (per-row, by publish minute)", "streamed (delivered, by commit minute)", "dead (by dead minute)"},
		[]string{"s-published", "s-streamed", "s-dead"},
		[][]float64{pick(func(m minute) float64 { return float64(m.Published) }), pick(func(m minute) float64 { return float64(m.Streamed) }),
			pick(func(m minute) float64 { return float64(m.Dead) })},
		func(top float64) string { return strconv.FormatFloat(top, 'f', 0, 64) + "/min" })
	hs.Lag = hs.newChart([]string{"lag p50 (per-row)", "lag max (per-row)"}, []string{"s-p50", "s-max"},
		[][]float64{pick(func(m minute) float64 { return m.LagP50 }), pick(func(m minute) float64 { return m.LagMax })},
		func(top float64) string {
			return (time.Duration(top * float64(time.Second))).Round(time.Millisecond).String()
		})
}

func (hs *history) newChart(names, classes []string, values [][]float64, label func(float64) string) chart {
	c := chart{Width: chartLeft + chartWidth + 24, Height: chartHeight + chartBottom + 8,
		X0: chartLeft, X1: chartLeft + chartWidth, Y0: 4, Y1: 4 + chartHeight}
	top := 0.0
	for _, vs := range values {
		for _, v := range vs {
			top = max(top, v)
		}
	}
	if top == 0 {
		top = 1
	}
	c.Top = label(top)
	n := len(hs.Minutes)
	x := func(i int) float64 { return chartLeft + float64(i)*chartWidth/float64(max(n-1, 1)) }
	for k, vs := range values {
		var b strings.Builder
		for i, v := range vs {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(i), 4+chartHeight*(1-v/top))
		}
		c.Series = append(c.Series, series{Name: names[k], Class: classes[k], Points: strings.TrimSpace(b.String())})
	}
	step := max(hs.Hours*60/6, 1)  // six labels
	for i := 0; i < n; i += step { // the labels' baseline is below the plot (Y1 + 16)
		c.Ticks = append(c.Ticks, tick{X: x(i), Label: hs.Since.Add(time.Duration(i) * time.Minute).UTC().Format("15:04")})
	}
	return c
}

// seriesColors are the series' stroke colors, as SVG presentation attributes (the page's CSP allows no
// style attribute).
var seriesColors = map[string]string{"s-published": "#0b5cad", "s-streamed": "#2e8540", "s-dead": "#b42318",
	"s-p50": "#0b5cad", "s-max": "#b26b00"}
