package alerts

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/testutil/versitygw"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(panickingControllerEnv); addr != "" {
		if err := runPanickingController(addr); err != nil {
			fmt.Fprintln(os.Stderr, "panicking controller:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The namespaces of the test: one per alert whose condition is about
// Sessions, so that each alert's namespace label says which trigger fired
// it.
const (
	nsStoreUnavailable = "store-unavailable"
	nsStoreDies        = "store-dies"
	nsStoreNotFound    = "store-not-found"
	nsWorkerFailed     = "worker-failed"
	nsObjectRefused    = "object-refused"
	nsReplayDegraded   = "replay-degraded"
	nsReconcileErrors  = "reconcile-errors"
	nsOrphans          = "orphans"
	nsQueue            = "queue"
	nsForks            = "forks"
	// nsManager is where the manager records orphaned logs (the manager's
	// own namespace in a cluster).
	nsManager = "turnlog-system"
)

// The manager's stores: default is a file:// store in the test's
// directory; unreachable and offline are S3 endpoints on ports nothing
// listens on (two, so that the store alert and the reconcile alert each
// have a trigger of their own); gateway is a real S3 server (versitygw)
// that the test kills and starts again. A Session naming missingStore
// names a store the manager does not have.
const (
	unreachableStore = "unreachable"
	offlineStore     = "offline"
	gatewayStore     = "gateway"
	missingStore     = "archive"
)

// alertStoreUnavailable is the alert the store cases are about.
const alertStoreUnavailable = "TurnlogStoreUnavailable"

// queueSessions is how many Sessions the queue namespace gets at once:
// at --namespace-reconcile-rate=1 the last of them wait about as many
// seconds for their reconcile, well over TurnlogQueueSlow's minute.
const queueSessions = 100

// harness is everything the test runs.
type harness struct {
	cluster  *cluster
	dir      string
	turnlog  string
	storeDir string
	storeURL string
	// gateway serves the store gatewayStore.
	gateway *versitygw.Server

	manager, panicker         *process
	managerAddr, panickerAddr string
	// shardManager is a manager of one shard, shardName, whose Sessions
	// are none (shard_test.go).
	shardManager *process
	shardAddr    string
	prom         *promServer
	// job is the scrape job of docs/observability.md's scrape config.
	job string
	// started is when the manager started: the dashboard's time range.
	started time.Time
}

// alertCase is one alert, the real condition that fires it, and the
// labels it must fire with (besides those of the shipped rule).
type alertCase struct {
	alert   string
	labels  map[string]string
	trigger func(t *testing.T)
	// evidence, if set, says what the manager made of the trigger (a
	// Session's Ready condition, say), for the test's log once the alert
	// fires.
	evidence func(t *testing.T) string
	within   time.Duration
}

// TestAlertsFireInPrometheus makes the condition of each of turnlog's
// alerts true for real, on the built manager, and reads the alert firing
// from a real Prometheus; then every query of the Grafana dashboard
// returns data; last, the manager stops and TurnlogManagerAbsent fires.
func TestAlertsFireInPrometheus(t *testing.T) {
	prometheusBinary(t)
	h := &harness{dir: t.TempDir()}
	// The shipped alerts and the test's cases must match before anything
	// starts: an alert added to config/prometheus needs a trigger here.
	ruleFile := filepath.Join(h.dir, "turnlog.rules.yml")
	rules := writeRules(t, ruleFile)
	cases := h.cases()
	byName := map[string]shippedRule{}
	for _, r := range rules {
		byName[r.Alert] = r
	}
	const absent = "TurnlogManagerAbsent"
	covered := []string{absent}
	for _, c := range cases {
		covered = append(covered, c.alert)
	}
	for _, r := range rules {
		if !slices.Contains(covered, r.Alert) {
			t.Errorf("config/prometheus ships alert %s, which this test does not make fire", r.Alert)
		}
	}
	for _, name := range covered {
		if _, ok := byName[name]; !ok {
			t.Errorf("the test makes alert %s fire, which config/prometheus does not ship", name)
		}
	}
	for name := range shippedFor {
		if _, ok := byName[name]; !ok {
			t.Errorf("the test evaluates alert %s with its shipped for:, and config/prometheus does not ship it", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The manager is built while the control plane starts.
	var buildErr error
	built := make(chan struct{})
	go func() {
		defer close(built)
		h.turnlog, buildErr = buildTurnlog(h.dir)
	}()
	t.Cleanup(func() { <-built }) // before the directory is removed
	h.cluster = startCluster(t, h.dir)
	h.cluster.createNamespaces(t, nsStoreUnavailable, nsStoreDies, nsStoreNotFound, nsWorkerFailed, nsObjectRefused, nsReplayDegraded,
		nsReconcileErrors, nsOrphans, nsQueue, nsForks, nsManager, panicNamespace)
	tokenFile := filepath.Join(h.dir, "prometheus.token")
	h.cluster.scraperToken(t, "monitoring", "prometheus", tokenFile)
	if <-built; buildErr != nil {
		t.Fatal(buildErr)
	}
	h.startManager(t)
	h.startPanickingController(t)
	h.startShardManager(t)
	scrape, job := docScrapeConfig(t, []string{h.managerAddr, h.panickerAddr, h.shardAddr}, tokenFile)
	h.job = job
	h.prom = startPrometheus(t, h.dir, scrape, ruleFile)
	h.waitScraped(t)

	// The conditions are made true one after the other (each takes
	// seconds), and then hold together while the alerts are read.
	triggered := map[string]time.Time{}
	t.Run("trigger", func(t *testing.T) {
		for _, c := range cases {
			start := time.Now()
			if t.Run(c.alert, c.trigger) {
				triggered[c.alert] = start
			}
		}
		// Not an alert's: the dashboard's SessionForks panel needs one.
		t.Run("SessionFork", h.fork)
	})
	// A store that was working dies and comes back (outage_test.go):
	// TurnlogStoreUnavailable, at its shipped for:, fires within a minute
	// and resolves by itself. It runs while the conditions above hold and
	// TurnlogQueueSlow's builds up.
	t.Run("StoreDiesAndComesBack", func(t *testing.T) {
		h.storeDiesAndComesBack(t, byName[alertStoreUnavailable])
	})
	// The quickest are read first; all conditions hold meanwhile.
	slices.SortStableFunc(cases, func(a, b alertCase) int { return cmp.Compare(a.within, b.within) })
	t.Run("firing", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.alert, func(t *testing.T) {
				at, ok := triggered[c.alert]
				if !ok {
					t.Fatalf("its condition could not be made true: see trigger/%s", c.alert)
				}
				h.manager.failIfExited(t)
				rule := byName[c.alert]
				a := h.prom.waitFiring(t, rule, withRuleLabels(rule, c.labels), c.within)
				t.Logf("active %s after its trigger, value %s: %v: %s", a.ActiveAt.Sub(at).Round(time.Second), a.Value, a.Labels, a.Annotations["summary"])
				if c.evidence != nil {
					t.Log(c.evidence(t))
				}
			})
		}
	})
	t.Run("dashboard", h.dashboardHasData)
	h.logScrapes(t)
	t.Run(absent, func(t *testing.T) {
		rule := byName[absent]
		for _, a := range matching(h.prom.alerts(t), absent, nil) {
			if a.State == "firing" {
				t.Fatalf("%s fires while the manager runs", absent)
			}
		}
		h.manager.stop()
		// absent() gives the labels of its selector's equality matchers.
		a := h.prom.waitFiring(t, rule, withRuleLabels(rule, map[string]string{"controller": "session"}), 2*time.Minute)
		t.Logf("firing after the manager stopped: %v: %s", a.Labels, a.Annotations["summary"])
	})
}

// withRuleLabels adds the shipped rule's own labels (its severity) to
// those the alert must carry.
func withRuleLabels(rule shippedRule, labels map[string]string) map[string]string {
	all := maps.Clone(rule.Labels)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, labels)
	return all
}

// cases are the alerts and their triggers, in the order they are made
// true; TurnlogQueueSlow, which needs the longest, is made true first and
// read last.
func (h *harness) cases() []alertCase {
	return []alertCase{
		{
			// Objects wait over a minute in the Session controller's queue:
			// a namespace held to one reconcile a second
			// (--namespace-reconcile-rate=1) gets queueSessions Sessions
			// at once, each queued on its creation and again at its
			// polls.
			alert: "TurnlogQueueSlow", labels: map[string]string{"controller": "session"},
			trigger: func(t *testing.T) {
				for i := range queueSessions {
					h.createSession(t, nsQueue, fmt.Sprintf("chat-%03d", i), "", "")
				}
			},
			within: 8 * time.Minute,
		},
		{
			// Reconciles that return errors: those of Sessions whose store
			// refuses connections (reconcileLog returns the store's error,
			// and the Session is retried with backoff). They are the first
			// Sessions of the test to fail; those of the triggers after
			// add their own errors and successes.
			alert: "TurnlogReconcileErrors", labels: map[string]string{"controller": "session"},
			trigger: func(t *testing.T) {
				for i := range 3 {
					h.createSession(t, nsReconcileErrors, fmt.Sprintf("failing-%d", i), offlineStore, "")
				}
			},
			evidence: h.readyOf(nsReconcileErrors, "failing-0"), within: 3 * time.Minute,
		},
		{
			// A store the manager has never reached: its endpoint refuses
			// connections. (One that dies and comes back:
			// storeDiesAndComesBack.)
			alert: alertStoreUnavailable, labels: map[string]string{"store": unreachableStore},
			trigger: func(t *testing.T) {
				h.createSession(t, nsStoreUnavailable, "cut-off-1", unreachableStore, "")
				h.createSession(t, nsStoreUnavailable, "cut-off-2", unreachableStore, "")
			},
			evidence: h.readyOf(nsStoreUnavailable, "cut-off-1"), within: 3 * time.Minute,
		},
		{
			alert: "TurnlogStoreNotFound", labels: map[string]string{"namespace": nsStoreNotFound, "store": missingStore},
			trigger: func(t *testing.T) {
				h.createSession(t, nsStoreNotFound, "lost", missingStore, "")
			},
			evidence: h.readyOf(nsStoreNotFound, "lost"), within: 3 * time.Minute,
		},
		{
			// A log whose first segment holds a line cut off in the
			// middle (a torn write by something other than turnlog): the
			// head, read from the last segment, is fine, but the assembly
			// run reads the log from seq 0, fails on the line, and with
			// --worker-max-failures=1 is given up at once.
			alert: "TurnlogWorkerRunsFailedPermanently", labels: map[string]string{"namespace": nsWorkerFailed},
			trigger: func(t *testing.T) {
				s := h.createSession(t, nsWorkerFailed, "damaged", "", "")
				h.placeLog(t, s, func(logDir string) error {
					for name, content := range damagedLog {
						if err := os.WriteFile(filepath.Join(logDir, name), []byte(content), 0o644); err != nil {
							return err
						}
					}
					return nil
				})
				h.nudge(t, s)
			},
			evidence: h.readyOf(nsWorkerFailed, "damaged"), within: 3 * time.Minute,
		},
		{
			// A symbolic link where the Session's log directory should be
			// in the file:// store, pointing out of the store
			// (docs/security.md, "The file store").
			alert: "TurnlogObjectRefused", labels: map[string]string{"namespace": nsObjectRefused},
			trigger: func(t *testing.T) {
				s := h.createSession(t, nsObjectRefused, "linked", "", "")
				elsewhere := filepath.Join(h.dir, "outside-the-store")
				if err := os.MkdirAll(elsewhere, 0o755); err != nil {
					t.Fatal(err)
				}
				root := h.sessionRoot(t, s)
				if err := os.MkdirAll(root, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(elsewhere, filepath.Join(root, "log")); err != nil {
					t.Fatal(err)
				}
				h.nudge(t, s)
			},
			evidence: h.readyOf(nsObjectRefused, "linked"), within: 3 * time.Minute,
		},
		{
			// The alert compares the namespace's degraded messages with
			// their lowest in the last hour, so the namespace's series is
			// scraped first at 0, with a clean log; then a log whose
			// assistant message carries replay state in the legacy flat
			// version-1 form (testdata/logs/legacy-flat-state.jsonl) is
			// imported, and replay sends that message provider-neutral.
			alert: "TurnlogReplayDegraded", labels: map[string]string{"namespace": nsReplayDegraded},
			trigger: func(t *testing.T) {
				h.importLog(t, nsReplayDegraded, "clean", "aborted-turn.jsonl")
				series := fmt.Sprintf(`turnlog_replay_messages{namespace=%q,replay="degraded"} == 0`, nsReplayDegraded)
				eventually(t, 2*time.Minute, "the namespace's degraded messages scraped at 0", func() (bool, string) {
					return len(h.prom.query(t, series)) > 0, "no sample of " + series
				})
				h.importLog(t, nsReplayDegraded, "legacy", "legacy-flat-state.jsonl")
			},
			evidence: h.readyOf(nsReplayDegraded, "legacy"), within: 3 * time.Minute,
		},
		{
			// See panics_test.go. The counter is scraped at 0 first, so
			// that increase() sees it grow.
			alert: "TurnlogReconcilePanics", labels: map[string]string{"controller": "sessionfork"},
			trigger: func(t *testing.T) {
				series := fmt.Sprintf(`controller_runtime_reconcile_panics_total{controller="sessionfork",instance=%q} == 0`, h.panickerAddr)
				eventually(t, 2*time.Minute, "the panicking controller's panics scraped at 0", func() (bool, string) {
					return len(h.prom.query(t, series)) > 0, "no sample of " + series
				})
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: panicNamespace, Name: panicObject}}
				if err := h.cluster.client.Create(t.Context(), cm); err != nil {
					t.Fatal(err)
				}
			},
			within: 3 * time.Minute,
		},
		{
			// See shard_test.go: the manager of a shard stops while the
			// unsharded manager runs on.
			alert: "TurnlogShardAbsent", labels: map[string]string{"shard": shardName},
			trigger: h.stopShardManager, within: 2 * time.Minute,
		},
		{
			// A deleted Session with retention Delete whose store refuses
			// connections: after --deletion-timeout it is released with
			// its log left in place and recorded in --orphan-namespace,
			// and every --orphan-sweep-interval the sweep fails to delete
			// the log again.
			alert: "TurnlogOrphanedLogs",
			trigger: func(t *testing.T) {
				s := h.createSession(t, nsOrphans, "doomed", unreachableStore, turnlogv1.RetentionDelete)
				eventually(t, 2*time.Minute, "the manager puts its finalizer on Session "+nsOrphans+"/doomed", func() (bool, string) {
					if err := h.cluster.client.Get(t.Context(), client.ObjectKeyFromObject(s), s); err != nil {
						t.Fatal(err)
					}
					return slices.Contains(s.Finalizers, turnlogv1.FinalizerRetention), fmt.Sprintf("finalizers %v", s.Finalizers)
				})
				if err := h.cluster.client.Delete(t.Context(), s); err != nil {
					t.Fatal(err)
				}
			},
			evidence: h.orphanRecords, within: 3 * time.Minute,
		},
	}
}
