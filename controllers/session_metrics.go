package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// The gauges below count Sessions and SessionForks by their conditions.
// They are computed from the manager's cache when Prometheus scrapes, not
// kept up to date by the reconcilers, so they cannot drift from what
// `kubectl get` shows: a deleted Session leaves them at once, and a
// restarted manager reports every Session without reconciling it first.
var (
	sessionsDesc = prometheus.NewDesc("turnlog_sessions",
		"Sessions by their Ready condition: its status (True, False, or Unknown before the first reconcile) and reason, and the store spec.storage.store names.",
		[]string{"namespace", "store", "ready", "reason"}, nil)
	replayDegradedDesc = prometheus.NewDesc("turnlog_sessions_replay_degraded",
		"Sessions whose ReplayDegraded condition is True: replay sent at least one of their messages provider-neutral.",
		[]string{"namespace"}, nil)
	replayMessagesDesc = prometheus.NewDesc("turnlog_replay_messages",
		"Assistant messages in the Sessions' replayed transcripts, as status.replay counts them: native (with their provider metadata), foreign (provider-neutral) and degraded (the foreign ones whose replay state was unusable).",
		[]string{"namespace", "replay"}, nil)
	replayRefusedDesc = prometheus.NewDesc("turnlog_replay_refused_blocks",
		"Thinking blocks the provider refused in the Sessions' requests (dropped because their signature no longer matched), as status.replay.refused counts them, by the provider's reason; unmapped counts the refusals replay could not map to a block.",
		[]string{"namespace", "reason"}, nil)
	sessionsDueDesc = prometheus.NewDesc("turnlog_sessions_due",
		"Sessions that spec.deleteAfterIdle deletes within the next hour or day (status.expiresAt), unless their log is appended to first.",
		[]string{"namespace", "within"}, nil)
	sessionForksDesc = prometheus.NewDesc("turnlog_sessionforks",
		"SessionForks by their Succeeded condition: its status (Unknown while forking, True, False) and reason.",
		[]string{"namespace", "succeeded", "reason"}, nil)
)

// statusMetrics is the one collector of those gauges in the process, as
// the metrics endpoint serves one registry; each manager that leads adds
// its cache to it (several do in the envtest suites, and their counts add
// up).
var statusMetrics = &statusCollector{sources: map[*statusSource]struct{}{}}

func init() { metrics.Registry.MustRegister(statusMetrics) }

// scrapeListTimeout bounds how long a scrape waits for the cache.
const scrapeListTimeout = 10 * time.Second

// addStatusMetrics reports mgr's Sessions and SessionForks in the gauges
// while mgr leads. Only the leader reports, so that summing over the
// manager's replicas counts every Session once.
func addStatusMetrics(mgr ctrl.Manager) error {
	if err := mgr.Add(&statusSource{reader: mgr.GetCache(), collector: statusMetrics}); err != nil {
		return fmt.Errorf("add the Session and SessionFork metrics: %w", err)
	}
	return nil
}

// statusSource is one manager's cache, counted in collector while the
// manager leads.
type statusSource struct {
	reader    client.Reader
	collector *statusCollector
}

func (s *statusSource) Start(ctx context.Context) error {
	s.collector.add(s)
	defer s.collector.remove(s)
	<-ctx.Done()
	return nil
}

// NeedLeaderElection makes the manager start the source only once it leads.
func (s *statusSource) NeedLeaderElection() bool { return true }

type statusCollector struct {
	mu      sync.Mutex
	sources map[*statusSource]struct{}
}

func (c *statusCollector) add(s *statusSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[s] = struct{}{}
}

func (c *statusCollector) remove(s *statusSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sources, s)
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- replayDegradedDesc
	ch <- replayMessagesDesc
	ch <- replayRefusedDesc
	ch <- sessionsDueDesc
	ch <- sessionForksDesc
}

type sessionKey struct{ namespace, store, ready, reason string }
type forkKey struct{ namespace, succeeded, reason string }
type messagesKey struct{ namespace, replay string }
type dueKey struct{ namespace, within string }

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := make([]*statusSource, 0, len(c.sources))
	for s := range c.sources {
		sources = append(sources, s)
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), scrapeListTimeout)
	defer cancel()
	sessions := map[sessionKey]float64{}
	degraded := map[string]float64{}
	messages := map[messagesKey]float64{}
	refused := map[messagesKey]float64{}
	forks := map[forkKey]float64{}
	due := map[dueKey]float64{}
	now := time.Now()
	for _, s := range sources {
		var list turnlogv1.SessionList
		// The objects are only read here; copying every Session of a large
		// cluster at each scrape would cost more than the rest of it.
		if err := s.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			ch <- prometheus.NewInvalidMetric(sessionsDesc, err)
		}
		for i := range list.Items {
			countSession(&list.Items[i], sessions, degraded, messages)
			countRefused(&list.Items[i], refused)
			countDue(&list.Items[i], now, due)
		}
		var forkList turnlogv1.SessionForkList
		if err := s.reader.List(ctx, &forkList, client.UnsafeDisableDeepCopy); err != nil {
			ch <- prometheus.NewInvalidMetric(sessionForksDesc, err)
		}
		for i := range forkList.Items {
			status, reason := conditionOf(forkList.Items[i].Status.Conditions, turnlogv1.ConditionSucceeded)
			forks[forkKey{forkList.Items[i].Namespace, status, reason}]++
		}
	}
	for k, v := range sessions {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, v, k.namespace, k.store, k.ready, k.reason)
	}
	for ns, v := range degraded {
		ch <- prometheus.MustNewConstMetric(replayDegradedDesc, prometheus.GaugeValue, v, ns)
	}
	for k, v := range messages {
		ch <- prometheus.MustNewConstMetric(replayMessagesDesc, prometheus.GaugeValue, v, k.namespace, k.replay)
	}
	for k, v := range refused {
		ch <- prometheus.MustNewConstMetric(replayRefusedDesc, prometheus.GaugeValue, v, k.namespace, k.replay)
	}
	for k, v := range due {
		ch <- prometheus.MustNewConstMetric(sessionsDueDesc, prometheus.GaugeValue, v, k.namespace, k.within)
	}
	for k, v := range forks {
		ch <- prometheus.MustNewConstMetric(sessionForksDesc, prometheus.GaugeValue, v, k.namespace, k.succeeded, k.reason)
	}
}

// countSession adds one Session to the gauges. Every namespace with a
// Session gets all of its series, zeros included, so that a rule comparing
// a series with its past sees a value rather than nothing.
func countSession(s *turnlogv1.Session, sessions map[sessionKey]float64, degraded map[string]float64, messages map[messagesKey]float64) {
	ns := s.Namespace
	ready, reason := conditionOf(s.Status.Conditions, turnlogv1.ConditionReady)
	sessions[sessionKey{ns, s.Spec.Storage.StoreName(), ready, reason}]++
	degraded[ns] += 0
	if meta.IsStatusConditionTrue(s.Status.Conditions, turnlogv1.ConditionReplayDegraded) {
		degraded[ns]++
	}
	var native, foreign, deg int64
	if r := s.Status.Replay; r != nil {
		native, foreign, deg = r.Native, r.Foreign, r.Degraded
	}
	messages[messagesKey{ns, "native"}] += float64(native)
	messages[messagesKey{ns, "foreign"}] += float64(foreign)
	messages[messagesKey{ns, "degraded"}] += float64(deg)
}

// countDue adds a Session that spec.deleteAfterIdle deletes within an
// hour, or a day, of now; a Session with spec.deleteAfterIdle puts its
// namespace's series in, zeros included.
func countDue(s *turnlogv1.Session, now time.Time, due map[dueKey]float64) {
	at := s.Status.ExpiresAt
	if s.Spec.DeleteAfterIdle == nil || at == nil {
		return
	}
	for _, w := range []struct {
		label string
		d     time.Duration
	}{{"1h", time.Hour}, {"24h", 24 * time.Hour}} {
		due[dueKey{s.Namespace, w.label}] += 0
		if at.Time.Before(now.Add(w.d)) {
			due[dueKey{s.Namespace, w.label}]++
		}
	}
}

// countRefused adds one Session's refused blocks to the gauge, by reason,
// zeros included.
func countRefused(s *turnlogv1.Session, refused map[messagesKey]float64) {
	var c turnlogv1.RefusedCounts
	if r := s.Status.Replay; r != nil {
		c = r.Refused
	}
	for reason, n := range map[string]int64{
		"prefix_binding_mismatch": c.PrefixBindingMismatch, "model_binding_mismatch": c.ModelBindingMismatch,
		"organization_binding_mismatch": c.OrganizationBindingMismatch, "end_user_binding_mismatch": c.EndUserBindingMismatch,
		"other": c.Other, "unmapped": c.Unmapped,
	} {
		refused[messagesKey{s.Namespace, reason}] += float64(n)
	}
}

// conditionOf is a condition's status and reason; a condition not set yet
// is Unknown with no reason.
func conditionOf(conditions []metav1.Condition, typ string) (status, reason string) {
	c := meta.FindStatusCondition(conditions, typ)
	if c == nil {
		return string(metav1.ConditionUnknown), ""
	}
	return string(c.Status), c.Reason
}
