package alerts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// storeDiesAndComesBack proves TurnlogStoreUnavailable on a store that
// dies and comes back, Prometheus evaluating it with its shipped for:
// (shippedFor). Sessions in the gateway store (versitygw) are read fine
// and scraped so; the gateway is killed (SIGKILL, as a store that
// crashes) and the alert must fire within a minute of the kill; the
// gateway is started again on the same address and data, and the alert
// must resolve — be gone from /api/v1/alerts — with the manager running
// on and the Sessions neither nudged nor touched: the manager's circuit
// breaker lets a probe through, and the Sessions' retries find the store.
func (h *harness) storeDiesAndComesBack(t *testing.T, rule shippedRule) {
	const fireWithin = time.Minute
	onGateway := map[string]string{"store": gatewayStore}
	labels := withRuleLabels(rule, onGateway)
	names := []string{"chat-1", "chat-2"}
	for _, name := range names {
		h.createSession(t, nsStoreDies, name, gatewayStore, "")
	}

	// Healthy first: the Sessions are read (an empty log each), Prometheus
	// has scraped them so and the breaker closed, and the alert is not
	// active for the store.
	eventually(t, 3*time.Minute, "the gateway store's Sessions read and scraped", func() (bool, string) {
		h.manager.failIfExited(t)
		var states []string
		for _, name := range names {
			s := h.sessionOf(t, nsStoreDies, name)
			c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady)
			if c == nil || c.Reason != turnlogv1.ReasonEmptyLog {
				return false, h.readyOf(nsStoreDies, name)(t)
			}
			states = append(states, c.Reason)
		}
		read := fmt.Sprintf(`sum(turnlog_sessions{namespace=%q,store=%q,reason=%q}) == %d`,
			nsStoreDies, gatewayStore, turnlogv1.ReasonEmptyLog, len(names))
		if len(h.prom.query(t, read)) == 0 {
			return false, "Sessions " + strings.Join(states, ", ") + "; Prometheus has no sample of " + read
		}
		closed := fmt.Sprintf(`turnlog_store_breaker_state{store=%q} == 0`, gatewayStore)
		if len(h.prom.query(t, closed)) == 0 {
			return false, "Prometheus has no sample of " + closed
		}
		return true, ""
	})
	if active := matching(h.prom.alerts(t), rule.Alert, onGateway); len(active) > 0 {
		t.Fatalf("%s is %s for the gateway store while it works", rule.Alert, active[0].State)
	}

	killed := time.Now()
	h.gateway.Kill()
	t.Logf("gateway store killed at %s", killed.Format(time.TimeOnly))
	// Waited for longer than a minute, so that a slow alert fails with
	// how slow it was.
	a := h.prom.waitFiring(t, rule, labels, 3*fireWithin)
	fired := time.Since(killed)
	t.Logf("%s firing %s after the kill (active %s after it, for: %s): %v: %s", rule.Alert, fired.Round(time.Second),
		a.ActiveAt.Sub(killed).Round(time.Second), rule.For, a.Labels, a.Annotations["summary"])
	for _, name := range names {
		t.Log(h.readyOf(nsStoreDies, name)(t))
	}
	h.logBreaker(t, "store dead")
	if fired > fireWithin {
		t.Errorf("%s fired %s after the gateway store was killed, not within %s", rule.Alert, fired.Round(time.Second), fireWithin)
	}

	if err := h.gateway.Restart(); err != nil {
		t.Fatalf("restart the gateway store: %v", err)
	}
	back := time.Now()
	t.Logf("gateway store answers again at %s", back.Format(time.TimeOnly))
	eventually(t, 3*time.Minute, fmt.Sprintf("alert %s%v resolved", rule.Alert, onGateway), func() (bool, string) {
		h.manager.failIfExited(t)
		var states []string
		for _, a := range matching(h.prom.alerts(t), rule.Alert, onGateway) {
			states = append(states, fmt.Sprintf("%s since %s", a.State, a.ActiveAt.Format(time.TimeOnly)))
		}
		if len(states) > 0 {
			return false, "it is " + strings.Join(states, ", ") + "; " + h.readyOf(nsStoreDies, names[0])(t)
		}
		return true, ""
	})
	t.Logf("%s resolved %s after the gateway store answered again", rule.Alert, time.Since(back).Round(time.Second))
	for _, name := range names {
		s := h.sessionOf(t, nsStoreDies, name)
		t.Log(h.readyOf(nsStoreDies, name)(t))
		if c := meta.FindStatusCondition(s.Status.Conditions, turnlogv1.ConditionReady); c == nil || c.Reason == turnlogv1.ReasonStoreUnavailable {
			t.Errorf("Session %s/%s is still not read: %s", nsStoreDies, name, h.readyOf(nsStoreDies, name)(t))
		}
		// Nothing but the manager touched the Sessions: no nudge.
		if at, ok := s.Annotations[turnlogv1.AnnotationRequestedAt]; ok {
			t.Errorf("Session %s/%s was nudged (%s=%s); the alert must resolve without", nsStoreDies, name, turnlogv1.AnnotationRequestedAt, at)
		}
	}
	h.logBreaker(t, "store back")
}

// sessionOf is the Session namespace/name as it is now.
func (h *harness) sessionOf(t *testing.T, namespace, name string) *turnlogv1.Session {
	t.Helper()
	s := &turnlogv1.Session{}
	if err := h.cluster.client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		t.Fatalf("get Session %s/%s: %v", namespace, name, err)
	}
	return s
}

// logBreaker logs what Prometheus has of the gateway store's breaker and
// failures now.
func (h *harness) logBreaker(t *testing.T, when string) {
	t.Helper()
	var parts []string
	for _, s := range h.prom.query(t, fmt.Sprintf(`turnlog_store_breaker_state{store=%q}`, gatewayStore)) {
		parts = append(parts, fmt.Sprintf("breaker state %g", s.value()))
	}
	for _, s := range h.prom.query(t, fmt.Sprintf(`turnlog_store_failures_total{store=%q}`, gatewayStore)) {
		parts = append(parts, fmt.Sprintf("%s failures %g", s.Metric["kind"], s.value()))
	}
	t.Logf("%s: gateway store: %s", when, strings.Join(parts, ", "))
}
