package controllers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// What an operator's Prometheus scrapes from the manager: the gauges follow
// the Sessions' and SessionForks' conditions, the shipped alerts and
// dashboard query only metrics the manager has, and the metrics are
// documented.
var _ = Describe("Metrics", Ordered, func() {
	m := localManager("metrics")

	It("counts Sessions and SessionForks by their conditions, and forgets deleted ones", func() {
		empty := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: "empty"}}
		lost := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: "lost"},
			Spec: turnlogv1.SessionSpec{Storage: turnlogv1.SessionStorage{Store: "archive"}, Retention: turnlogv1.RetentionRetain}}
		fork := &turnlogv1.SessionFork{ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: "orphan"},
			Spec: turnlogv1.SessionForkSpec{Source: turnlogv1.SessionReference{Name: "missing"}, AtSeq: "3"}}
		Expect(k8sClient.Create(ctx, empty)).To(Succeed())
		Expect(k8sClient.Create(ctx, lost)).To(Succeed())
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())

		Eventually(func(g Gomega) {
			fams := gatherMetrics(g)
			g.Expect(series(fams, "turnlog_sessions", m.ns)).To(Equal(map[string]float64{
				`ready="True",reason="EmptyLog",store="default"`:       1,
				`ready="False",reason="StoreNotFound",store="archive"`: 1,
			}))
			g.Expect(series(fams, "turnlog_sessionforks", m.ns)).To(Equal(map[string]float64{
				`reason="SourceNotFound",succeeded="False"`: 1,
			}))
			g.Expect(series(fams, "turnlog_sessions_replay_degraded", m.ns)).To(Equal(map[string]float64{"": 0}))
			g.Expect(series(fams, "turnlog_replay_messages", m.ns)).To(Equal(map[string]float64{
				`replay="native"`: 0, `replay="foreign"`: 0, `replay="degraded"`: 0,
			}))
		}).Should(Succeed())

		By("deleting a Session")
		Expect(k8sClient.Delete(ctx, empty)).To(Succeed())
		Eventually(func(g Gomega) map[string]float64 {
			return series(gatherMetrics(g), "turnlog_sessions", m.ns)
		}).Should(Equal(map[string]float64{`ready="False",reason="StoreNotFound",store="archive"`: 1}))
	})

	It("has every metric the alerts and the dashboard query, and docs/observability.md lists them", func() {
		queried := map[string][]string{} // metric name: where it is queried
		for _, q := range shippedQueries() {
			names := promqlMetricNames(q.expr)
			Expect(names).NotTo(BeEmpty(), "%s: %s names no metric", q.where, q.expr)
			for _, name := range names {
				queried[name] = append(queried[name], q.where)
			}
		}
		// The alerts' own metrics, so the parsing above cannot pass by
		// finding nothing.
		Expect(queried).To(HaveKey("turnlog_sessions"))
		Expect(queried).To(HaveKey("controller_runtime_reconcile_errors_total"))

		fams := gatherMetrics(Default)
		exposed := map[string]bool{}
		for _, f := range fams {
			exposed[f.GetName()] = true
			if t := f.GetType(); t == dto.MetricType_HISTOGRAM || t == dto.MetricType_SUMMARY {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					exposed[f.GetName()+suffix] = true
				}
			}
		}
		for name, where := range queried {
			Expect(exposed).To(HaveKey(name), "%s, queried by %v, is not among the manager's metrics", name, where)
		}

		doc, err := os.ReadFile(filepath.Join("..", "docs", "observability.md"))
		Expect(err).NotTo(HaveOccurred())
		for _, f := range fams {
			if strings.HasPrefix(f.GetName(), "turnlog_") {
				Expect(string(doc)).To(ContainSubstring("`"+f.GetName()+"`"), "the manager exposes %s", f.GetName())
			}
		}
		for name := range queried {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if !exposed[base] {
				base = name
			}
			Expect(string(doc)).To(ContainSubstring("`"+base+"`"), "the alerts or the dashboard query %s", name)
		}
	})
})

// gatherMetrics is what a scrape of the manager's metrics endpoint returns.
func gatherMetrics(g Gomega) []*dto.MetricFamily {
	fams, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	return fams
}

// series returns the values of a family's series in namespace, keyed by
// their other labels.
func series(fams []*dto.MetricFamily, name, namespace string) map[string]float64 {
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			inNamespace := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" {
					inNamespace = l.GetValue() == namespace
					continue
				}
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if inNamespace {
				slices.Sort(labels)
				out[strings.Join(labels, ",")] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

type shippedQuery struct{ where, expr string }

// shippedQueries are the PromQL expressions of the alerts in
// config/prometheus and of the dashboard in config/grafana.
func shippedQueries() []shippedQuery {
	GinkgoHelper()
	var out []shippedQuery
	data, err := os.ReadFile(filepath.Join("..", "config", "prometheus", "prometheus_rule.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert  string `json:"alert"`
					Record string `json:"record"`
					Expr   string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	Expect(yaml.Unmarshal(data, &rule)).To(Succeed())
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			out = append(out, shippedQuery{"alert " + r.Alert + r.Record, r.Expr})
		}
	}
	Expect(out).NotTo(BeEmpty())

	data, err = os.ReadFile(filepath.Join("..", "config", "grafana", "turnlog.json"))
	Expect(err).NotTo(HaveOccurred())
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	Expect(json.Unmarshal(data, &dash)).To(Succeed())
	panels := 0
	for _, p := range dash.Panels {
		for _, t := range p.Targets {
			out = append(out, shippedQuery{"panel " + p.Title, t.Expr})
			panels++
		}
	}
	Expect(panels).NotTo(BeZero())
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			out = append(out, shippedQuery{"variable " + v.Name, m[1]})
		}
	}
	return out
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlToken    = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// promqlMetricNames returns the metric names a PromQL expression (or a
// Grafana query, with its $variables) selects: the identifiers that are
// neither functions, keywords, numbers, nor inside label matchers, ranges
// or grouping clauses.
func promqlMetricNames(expr string) []string {
	expr = promqlStrings.ReplaceAllString(expr, `""`)
	expr = promqlMatchers.ReplaceAllString(expr, " ")
	expr = promqlGrouping.ReplaceAllString(expr, " ")
	var names []string
	for _, tok := range promqlToken.FindAllString(expr, -1) {
		if !strings.HasSuffix(tok, "(") {
			tok = strings.TrimSpace(tok)
		}
		switch {
		case tok[0] >= '0' && tok[0] <= '9', strings.HasSuffix(tok, "("), slices.Contains(promqlKeywords, strings.ToLower(tok)):
			continue
		}
		if !slices.Contains(names, tok) {
			names = append(names, tok)
		}
	}
	return names
}
