package alerts

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dashboard is what the test reads of config/grafana/turnlog.json.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
			IncludeAll bool   `json:"includeAll"`
			AllValue   string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "grafana", "turnlog.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("config/grafana/turnlog.json: %v", err)
	}
	return d
}

// labelValues is Grafana's label_values(SELECTOR, LABEL) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+), *(\w+)\)$`)

// variableValues runs each query variable's query as Grafana does to fill
// its drop-down (found: the options, by variable), and returns what
// Grafana puts in the queries with the dashboard as it opens: "All", the
// variable's allValue. A variable whose drop-down would be empty is an
// error.
func (p *promServer) variableValues(t *testing.T, d dashboard, start, end time.Time) (values map[string]string, found map[string][]string) {
	t.Helper()
	values, found = map[string]string{}, map[string][]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("dashboard variable %s: query %q is not label_values(SELECTOR, LABEL), which the test runs", v.Name, v.Definition)
		}
		var options []string
		params := url.Values{"match[]": {m[1]}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)}}
		if err := p.api("/api/v1/label/"+m[2]+"/values", params, &options); err != nil {
			t.Fatalf("dashboard variable %s: %v", v.Name, err)
		}
		if len(options) == 0 {
			t.Fatalf("dashboard variable %s: %s finds no values: its drop-down is empty", v.Name, v.Definition)
		}
		t.Logf("dashboard variable $%s offers %s", v.Name, strings.Join(options, ", "))
		found[v.Name] = options
		if !v.IncludeAll || v.AllValue == "" {
			t.Fatalf("dashboard variable %s has no All value; the test knows only variables that open on All", v.Name)
		}
		values["$"+v.Name] = v.AllValue
		values["${"+v.Name+"}"] = v.AllValue
	}
	return values, found
}

// grafanaIntervals are Grafana's built-in variables for a panel whose
// query runs every step, over a Prometheus that scrapes every scrape:
// $__rate_interval is max($__interval + scrape interval, 4 × scrape
// interval), as Grafana computes it.
func grafanaIntervals(step, scrape, window time.Duration) map[string]string {
	rate := max(step+scrape, 4*scrape)
	return map[string]string{
		"$__rate_interval": promDuration(rate),
		"$__interval":      promDuration(step),
		"$__range":         promDuration(window),
	}
}

// promDuration writes d as PromQL does: whole seconds.
func promDuration(d time.Duration) string {
	return strconv.Itoa(int(d.Round(time.Second).Seconds())) + "s"
}

// substitute puts the variables' values into expr, longest name first
// (so $__rate_interval is not taken for $__range followed by text); a
// variable left over is an error.
func substitute(expr string, values map[string]string) (string, error) {
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, name := range names {
		expr = strings.ReplaceAll(expr, name, values[name])
	}
	if i := strings.Index(expr, "$"); i >= 0 {
		return "", fmt.Errorf("a variable the test does not know at %q", expr[i:])
	}
	return expr, nil
}

// dashboardStep is the step of the dashboard's range queries: Grafana's
// $__interval for a panel of some 700 points over a few minutes.
const dashboardStep = 5 * time.Second

// dashboardHasData runs every query of the dashboard as Grafana runs it
// when the dashboard opens (All namespaces, every manager job), over the
// time since the manager started, while every alert's condition holds:
// each must return data.
func (h *harness) dashboardHasData(t *testing.T) {
	d := readDashboard(t)
	end := time.Now()
	values, found := h.prom.variableValues(t, d, h.started, end)
	if !slices.Contains(found["job"], h.job) {
		t.Errorf("the dashboard's job variable offers %v, not the scrape job %s", found["job"], h.job)
	}
	scrape, err := time.ParseDuration(interval)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range grafanaIntervals(dashboardStep, scrape, end.Sub(h.started)) {
		values[name] = v
	}
	queries := 0
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			queries++
			expr, err := substitute(target.Expr, values)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			result, err := h.prom.queryRange(expr, h.started, end, dashboardStep)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			points := 0
			var legends []string
			for _, s := range result {
				if n := s.points(); n > 0 {
					points += n
					legends = append(legends, fmt.Sprint(s.Metric))
				}
			}
			if points == 0 {
				t.Errorf("panel %q: no data from %s (%d series, none with a number)", p.Title, expr, len(result))
				continue
			}
			t.Logf("panel %q: %d series with data: %s", p.Title, len(legends), strings.Join(legends, " "))
		}
	}
	if queries == 0 {
		t.Fatal("the dashboard has no queries")
	}
	t.Logf("%d queries, each with data", queries)
}
