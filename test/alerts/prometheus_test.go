package alerts

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// prometheusBinary is Debian's prometheus, which `make prometheus-server`
// installs; `make test` does so before the tests.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("no prometheus on $PATH: run `make prometheus-server` (Debian's prometheus package, as root)")
	}
	return bin
}

// interval is Prometheus' scrape and evaluation interval, and alertFor
// the `for:` every alert that has one is given instead of its minutes
// (but those of shippedFor).
const (
	interval = "1s"
	alertFor = "5s"
)

// shippedFor are the alerts Prometheus evaluates with their shipped
// `for:`, because how soon they fire is part of what the test proves,
// each with the longest `for:` the test accepts of it (so that it stays
// cheap to wait for): TurnlogStoreUnavailable must fire within a minute
// of a store going dead (storeDiesAndComesBack).
var shippedFor = map[string]time.Duration{
	alertStoreUnavailable: time.Minute,
}

// shippedRule is an alerting rule of config/prometheus/prometheus_rule.yaml.
type shippedRule struct {
	Alert  string            `json:"alert"`
	Expr   string            `json:"expr"`
	For    string            `json:"for"`
	Labels map[string]string `json:"labels"`
}

// forDuration is the rule's shipped `for:` (zero without one).
func (r shippedRule) forDuration(t *testing.T) time.Duration {
	t.Helper()
	if r.For == "" {
		return 0
	}
	d, err := time.ParseDuration(r.For)
	if err != nil {
		t.Fatalf("alert %s: for: %q: %v", r.Alert, r.For, err)
	}
	return d
}

// writeRules writes the PrometheusRule's spec — a Prometheus rule file —
// to file with every `for:` set to alertFor but those of shippedFor's
// alerts, which keep theirs, and returns the alerts as shipped. Nothing
// else of a rule is touched: the expressions Prometheus evaluates are the
// shipped ones.
func writeRules(t *testing.T, file string) []shippedRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "config", "prometheus", "prometheus_rule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []map[string]any `json:"groups"`
		} `json:"spec"`
	}
	var shipped struct {
		Spec struct {
			Groups []struct {
				Rules []shippedRule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	for _, into := range []any{&rule, &shipped} {
		if err := yaml.Unmarshal(data, into); err != nil {
			t.Fatalf("config/prometheus/prometheus_rule.yaml: %v", err)
		}
	}
	for _, g := range rule.Spec.Groups {
		rules, _ := g["rules"].([]any)
		for _, r := range rules {
			if r, ok := r.(map[string]any); ok && r["for"] != nil {
				if _, keep := shippedFor[fmt.Sprint(r["alert"])]; !keep {
					r["for"] = alertFor
				}
			}
		}
	}
	out, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	var alerts []shippedRule
	for _, g := range shipped.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if longest, keep := shippedFor[r.Alert]; keep && r.forDuration(t) > longest {
				t.Fatalf("alert %s is shipped with for: %s; the test evaluates it as shipped and accepts at most %s", r.Alert, r.For, longest)
			}
			alerts = append(alerts, r)
		}
	}
	return alerts
}

// docScrapeConfig is the scrape_configs block of docs/observability.md
// for a Prometheus without the Operator, with its two placeholders filled
// in: the targets and the file of the bearer token. Everything else —
// scheme, path, authorization, TLS — is the doc's, so the doc says what
// was proven.
func docScrapeConfig(t *testing.T, targets []string, tokenFile string) (scrapeConfigs []map[string]any, job string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```yaml\n(scrape_configs:\n.*?)```").FindSubmatch(data)
	if block == nil {
		t.Fatal("docs/observability.md has no ```yaml block starting with scrape_configs:, which the test scrapes with")
	}
	var doc struct {
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(block[1], &doc); err != nil {
		t.Fatalf("docs/observability.md's scrape config: %v", err)
	}
	if len(doc.ScrapeConfigs) != 1 {
		t.Fatalf("docs/observability.md's scrape config has %d jobs, want one", len(doc.ScrapeConfigs))
	}
	sc := doc.ScrapeConfigs[0]
	auth, _ := sc["authorization"].(map[string]any)
	static, _ := sc["static_configs"].([]any)
	if auth == nil || auth["credentials_file"] == nil || len(static) != 1 {
		t.Fatalf("docs/observability.md's scrape config has no authorization.credentials_file or not one static_configs entry, which the test fills in: %v", sc)
	}
	auth["credentials_file"] = tokenFile
	sc["static_configs"] = []any{map[string]any{"targets": targets}}
	job, _ = sc["job_name"].(string)
	return doc.ScrapeConfigs, job
}

// promServer is a running Prometheus and its HTTP API.
type promServer struct {
	*process
	url string
}

// startPrometheus runs Debian's prometheus with its own configuration and
// data in dir, on a free port of 127.0.0.1: the daemon the package's
// postinst may have started (on :9090, with /etc/prometheus) is not used.
func startPrometheus(t *testing.T, dir string, scrapeConfigs []map[string]any, ruleFile string) *promServer {
	t.Helper()
	bin := prometheusBinary(t)
	config, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": interval, "evaluation_interval": interval},
		"rule_files":     []string{ruleFile},
		"scrape_configs": scrapeConfigs,
	})
	if err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, config, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &promServer{url: "http://" + addr}
	p.process = startProcess(t, "prometheus", filepath.Join(dir, "prometheus.log"), nil, bin,
		"--config.file="+configFile, "--storage.tsdb.path="+filepath.Join(dir, "prometheus-data"),
		"--web.listen-address="+addr)
	eventually(t, 2*time.Minute, "Prometheus ready", func() (bool, string) {
		p.failIfExited(t)
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// api calls Prometheus' HTTP API and decodes the response's data.
func (p *promServer) api(path string, params url.Values, data any) error {
	resp, err := http.Get(p.url + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, params.Encode(), r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// sample is one series of an instant query's result.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s sample) value() float64 {
	v, _ := s.Value[1].(string)
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

// query runs an instant query now.
func (p *promServer) query(t *testing.T, expr string) []sample {
	t.Helper()
	var data struct {
		Result []sample `json:"result"`
	}
	if err := p.api("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	return data.Result
}

// series is one series of a range query's result.
type series struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// points counts the samples of s that are numbers (histogram_quantile
// gives NaN over no observations, which a panel does not draw).
func (s series) points() int {
	n := 0
	for _, v := range s.Values {
		str, _ := v[1].(string)
		if f, err := strconv.ParseFloat(str, 64); err == nil && !math.IsNaN(f) {
			n++
		}
	}
	return n
}

// queryRange runs a range query, as a Grafana panel does.
func (p *promServer) queryRange(expr string, start, end time.Time, step time.Duration) ([]series, error) {
	var data struct {
		Result []series `json:"result"`
	}
	params := url.Values{
		"query": {expr}, "step": {step.String()},
		"start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)},
	}
	err := p.api("/api/v1/query_range", params, &data)
	return data.Result, err
}

// activeAlert is an alert of /api/v1/alerts.
type activeAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

func (p *promServer) alerts(t *testing.T) []activeAlert {
	t.Helper()
	var data struct {
		Alerts []activeAlert `json:"alerts"`
	}
	if err := p.api("/api/v1/alerts", nil, &data); err != nil {
		t.Fatalf("read the alerts: %v", err)
	}
	return data.Alerts
}

// matching are the active alerts named name whose labels include labels.
func matching(alerts []activeAlert, name string, labels map[string]string) []activeAlert {
	var out []activeAlert
	for _, a := range alerts {
		if a.Labels["alertname"] != name {
			continue
		}
		ok := true
		for k, v := range labels {
			ok = ok && a.Labels[k] == v
		}
		if ok {
			out = append(out, a)
		}
	}
	return out
}

// waitFiring waits for the alert to fire with labels among its labels,
// and returns it. On timeout it fails with where the alert stands: the
// states of its active instances, or what its expression gives now.
func (p *promServer) waitFiring(t *testing.T, rule shippedRule, labels map[string]string, within time.Duration) activeAlert {
	t.Helper()
	var firing activeAlert
	eventually(t, within, fmt.Sprintf("alert %s%v firing", rule.Alert, labels), func() (bool, string) {
		all := p.alerts(t)
		var states []string
		for _, a := range matching(all, rule.Alert, labels) {
			if a.State == "firing" {
				firing = a
				return true, ""
			}
			states = append(states, fmt.Sprintf("%s since %s", a.State, a.ActiveAt.Format(time.TimeOnly)))
		}
		if len(states) > 0 {
			return false, "it is " + strings.Join(states, ", ")
		}
		var now []string
		for _, s := range p.query(t, rule.Expr) {
			now = append(now, fmt.Sprintf("%v=%g", s.Metric, s.value()))
		}
		others := matching(all, rule.Alert, nil)
		return false, fmt.Sprintf("it is not active (other instances: %d); its expression gives %v", len(others), now)
	})
	return firing
}
