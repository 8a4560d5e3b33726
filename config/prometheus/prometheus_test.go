// Package prometheus_test checks config/prometheus: the alerting rules
// with Prometheus' own promtool, pinned in hack/promtool (`make promtool`
// builds it), and that the ServiceMonitor finds the manager.
package prometheus_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtool is $PROMTOOL, else bin/promtool, which `make promtool` builds
// before the tests; run alone, the test builds it the same way.
func promtool(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("PROMTOOL"); path != "" {
		return path
	}
	path, err := filepath.Abs(filepath.Join("..", "..", "bin", "promtool"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		return path
	}
	t.Logf("building %s (make promtool)", path)
	build := exec.Command("go", "build", "-tags", "remove_all_sd", "-o", path, "github.com/prometheus/prometheus/cmd/promtool")
	build.Dir = filepath.Join("..", "..", "hack", "promtool")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build promtool: %v\n%s", err, out)
	}
	return path
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert"`
		} `json:"rules"`
	} `json:"groups"`
}

type testFile struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// rulesDir writes the PrometheusRule's spec, which is a Prometheus rule
// file, and the unit tests of its alerts into a directory for promtool.
func rulesDir(t *testing.T) (dir string, rules ruleFile, tests testFile) {
	t.Helper()
	data, err := os.ReadFile("prometheus_rule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Kind string         `json:"kind"`
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatalf("prometheus_rule.yaml: %v", err)
	}
	if rule.Kind != "PrometheusRule" {
		t.Fatalf("prometheus_rule.yaml is a %q, want a PrometheusRule", rule.Kind)
	}
	spec, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(spec, &rules); err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile("prometheus_rule_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(unit, &tests); err != nil {
		t.Fatalf("prometheus_rule_test.yaml: %v", err)
	}
	dir = t.TempDir()
	for name, content := range map[string][]byte{"turnlog.rules.yml": spec, "prometheus_rule_test.yaml": unit} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, rules, tests
}

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The rules load in Prometheus: promtool check rules parses every
// expression and template and lints for duplicates.
func TestRulesCheck(t *testing.T) {
	dir, rules, _ := rulesDir(t)
	n := 0
	for _, g := range rules.Groups {
		n += len(g.Rules)
	}
	out := run(t, dir, "check", "rules", "turnlog.rules.yml")
	if want := "SUCCESS: " + strconv.Itoa(n) + " rules found"; !strings.Contains(out, want) {
		t.Fatalf("promtool check rules: want %q in\n%s", want, out)
	}
}

// Every alert fires on the series of the failure it is about, with the
// labels and text an operator gets, and stays quiet on healthy series.
func TestRulesUnitTests(t *testing.T) {
	dir, rules, tests := rulesDir(t)
	run(t, dir, "test", "rules", "prometheus_rule_test.yaml")

	// An alert no test sees firing could be one that never fires.
	fired := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	var alerts, untested []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if !fired[r.Alert] {
				untested = append(untested, r.Alert)
			}
		}
	}
	if len(untested) > 0 {
		t.Errorf("no test in prometheus_rule_test.yaml shows these alerts firing: %v", untested)
	}
	for name := range fired {
		if !slices.Contains(alerts, name) {
			t.Errorf("prometheus_rule_test.yaml tests alert %s, which prometheus_rule.yaml does not have", name)
		}
	}
}

// The ServiceMonitor finds the manager's metrics Service, and the port it
// scrapes is the one the manager serves metrics on.
func TestServiceMonitorSelectsTheMetricsService(t *testing.T) {
	data, err := os.ReadFile("monitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var monitor struct {
		Kind string `json:"kind"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port   string `json:"port"`
				Scheme string `json:"scheme"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &monitor); err != nil || monitor.Kind != "ServiceMonitor" {
		t.Fatalf("monitor.yaml is no ServiceMonitor (%v)", err)
	}
	if len(monitor.Spec.Endpoints) != 1 || len(monitor.Spec.Selector.MatchLabels) == 0 {
		t.Fatalf("want one endpoint and a label selector, got %+v", monitor.Spec)
	}
	endpoint := monitor.Spec.Endpoints[0]

	manifests, err := os.ReadFile(filepath.Join("..", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type port struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
		TargetPort    string `json:"targetPort"`
	}
	var services []string
	for _, doc := range strings.Split(string(manifests), "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Ports    []port `json:"ports"`
				Template struct {
					Spec struct {
						Containers []struct {
							Args  []string `json:"args"`
							Ports []port   `json:"ports"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case "Service":
			selected := true
			for k, v := range monitor.Spec.Selector.MatchLabels {
				selected = selected && obj.Metadata.Labels[k] == v
			}
			if !selected {
				continue
			}
			services = append(services, obj.Metadata.Name)
			i := slices.IndexFunc(obj.Spec.Ports, func(p port) bool { return p.Name == endpoint.Port })
			if i < 0 || obj.Spec.Ports[i].TargetPort != "metrics" {
				t.Errorf("Service %s has no port %q onto the container port metrics: %+v", obj.Metadata.Name, endpoint.Port, obj.Spec.Ports)
			}
		case "Deployment":
			c := obj.Spec.Template.Spec.Containers[0]
			i := slices.IndexFunc(c.Ports, func(p port) bool { return p.Name == "metrics" })
			if i < 0 {
				t.Fatalf("the manager's container has no port named metrics")
			}
			bind := "--metrics-bind-address=:" + strconv.Itoa(c.Ports[i].ContainerPort)
			if !slices.Contains(c.Args, bind) {
				t.Errorf("the manager does not serve metrics on its metrics port: want %s in %v", bind, c.Args)
			}
			if endpoint.Scheme == "https" && slices.Contains(c.Args, "--metrics-secure=false") {
				t.Errorf("the ServiceMonitor scrapes https, the manager serves http")
			}
		}
	}
	if len(services) != 1 {
		t.Errorf("the ServiceMonitor's selector %v matches Services %v in config/manager, want exactly one", monitor.Spec.Selector.MatchLabels, services)
	}
}

// The dashboard's queries are PromQL Prometheus accepts, once Grafana has
// put in its variables: promtool checks them as recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "grafana", "turnlog.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("turnlog.json: %v", err)
	}
	// What Grafana substitutes: a range for $__rate_interval, regexes for
	// the variables (all namespaces, any job, any shard).
	variables := strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*", "$job", ".+", "$shard", ".*")
	var rules []map[string]string
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			rules = append(rules, map[string]string{
				"record": "dashboard:query_" + strconv.Itoa(len(rules)),
				"expr":   variables.Replace(target.Expr),
			})
		}
	}
	if len(rules) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	file, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yml"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "check", "rules", "dashboard.rules.yml")
}
