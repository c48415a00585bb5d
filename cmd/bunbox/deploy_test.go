package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The dashboard and the alert rules shipped in deploy/.
var (
	dashboardFile  = filepath.Join("..", "..", "deploy", "grafana", "bunbox-relay.json")
	alertRulesFile = filepath.Join("..", "..", "deploy", "prometheus", "bunbox-alerts.yml")
)

// deployQueries returns every PromQL expression of the dashboard's panels and of the alert rules.
func deployQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash any
	require.NoError(t, json.Unmarshal(raw, &dash), "the dashboard is JSON")
	var queries []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					queries = append(queries, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	require.NotEmpty(t, queries, "the dashboard has queries")

	raw, err = os.ReadFile(alertRulesFile)
	require.NoError(t, err)
	rules := string(raw)
	exprs := regexp.MustCompile(`(?m)^\s+expr:\s*(.+)$`).FindAllStringSubmatch(rules, -1)
	require.Len(t, exprs, strings.Count(rules, "- alert:"), "one expr per alert, each on one line")
	for _, m := range exprs {
		queries = append(queries, m[1])
	}
	return queries
}

var metricName = regexp.MustCompile(`\bbunbox_[a-z0-9_]+`)

// requireDeployMetricsExported fails unless every bunbox metric that a query of deploy/ names is in the
// scraped body (a histogram's _bucket, _sum and _count series by the histogram's name). Prometheus' own
// up is the only other metric the queries may use.
func requireDeployMetricsExported(t *testing.T, body string) {
	t.Helper()
	types := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	for _, q := range deployQueries(t) {
		require.NotContains(t, regexp.MustCompile(`\b[a-z_]+\{`).ReplaceAllStringFunc(q, func(s string) string {
			if name := strings.TrimSuffix(s, "{"); name == "up" || strings.HasPrefix(name, "bunbox_") {
				return ""
			}
			return s
		}), "{", "query %q selects a metric that is neither bunbox's nor up", q)
		for _, name := range metricName.FindAllString(q, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && types[b] == "histogram" {
					base = b
				}
			}
			require.Contains(t, types, base, "query %q names %s, which the relay does not export", q, name)
			require.Contains(t, body, "\n"+name, "query %q names %s, which has no sample", q, name)
		}
	}
}

// TestAlertRulesPromtool checks the alert rules with promtool: their syntax (check rules) and their unit
// tests in deploy/prometheus/bunbox-alerts_test.yml (test rules).
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	require.NotEmpty(t, deployQueries(t))
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found, skipping `promtool check rules` and `promtool test rules` (Debian's prometheus package provides it)")
	}
	out, err := exec.Command(promtool, "check", "rules", alertRulesFile).CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)
	require.Contains(t, string(out), "SUCCESS")
	// The rules' unit tests: each alert fires on the series it is about, and not before its time.
	out, err = exec.Command(promtool, "test", "rules", strings.TrimSuffix(alertRulesFile, ".yml")+"_test.yml").CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)
	require.Contains(t, string(out), "SUCCESS")
}
