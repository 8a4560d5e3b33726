package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// The gauges add up the Sessions' replay counts and conditions per
// namespace, count each Session once, and report nothing while the manager
// does not lead.
func TestStatusMetrics(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := turnlogv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	session := func(ns, name, store string, ready metav1.ConditionStatus, reason string, degraded bool, replay *turnlogv1.ReplaySummary) *turnlogv1.Session {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		s.Spec.Storage.Store = store
		s.Status.Replay = replay
		if reason != "" {
			s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: turnlogv1.ConditionReady, Status: ready, Reason: reason})
		}
		if degraded {
			s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: turnlogv1.ConditionReplayDegraded, Status: metav1.ConditionTrue, Reason: turnlogv1.ReasonMessagesDegraded})
		}
		return s
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		session("team-a", "one", "", metav1.ConditionTrue, turnlogv1.ReasonCurrent, true,
			&turnlogv1.ReplaySummary{Native: 4, Foreign: 3, Degraded: 2, Refused: turnlogv1.RefusedCounts{PrefixBindingMismatch: 2, Unmapped: 1}}),
		session("team-a", "two", "", metav1.ConditionTrue, turnlogv1.ReasonCurrent, false,
			&turnlogv1.ReplaySummary{Native: 1, Foreign: 1, Refused: turnlogv1.RefusedCounts{PrefixBindingMismatch: 1, ModelBindingMismatch: 1}}),
		session("team-a", "three", "archive", metav1.ConditionFalse, turnlogv1.ReasonWorkerFailedPermanently, true,
			&turnlogv1.ReplaySummary{Foreign: 5, Degraded: 5}),
		// Created, not reconciled yet.
		session("team-b", "new", "", "", "", false, nil),
		&turnlogv1.SessionFork{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "fork"}},
	).Build()

	collector := &statusCollector{sources: map[*statusSource]struct{}{}}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collector)
	if n, err := testutil.GatherAndCount(registry); err != nil || n != 0 {
		t.Fatalf("before the manager leads: %d series (%v), want none", n, err)
	}

	source := &statusSource{reader: reader, collector: collector}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- source.Start(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := testutil.GatherAndCount(registry); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no series once the manager leads")
		}
	}

	want := `
# HELP turnlog_replay_messages Assistant messages in the Sessions' replayed transcripts, as status.replay counts them: native (with their provider metadata), foreign (provider-neutral) and degraded (the foreign ones whose replay state was unusable).
# TYPE turnlog_replay_messages gauge
turnlog_replay_messages{namespace="team-a",replay="degraded"} 7
turnlog_replay_messages{namespace="team-a",replay="foreign"} 9
turnlog_replay_messages{namespace="team-a",replay="native"} 5
turnlog_replay_messages{namespace="team-b",replay="degraded"} 0
turnlog_replay_messages{namespace="team-b",replay="foreign"} 0
turnlog_replay_messages{namespace="team-b",replay="native"} 0
# HELP turnlog_replay_refused_blocks Thinking blocks the provider refused in the Sessions' requests (dropped because their signature no longer matched), as status.replay.refused counts them, by the provider's reason; unmapped counts the refusals replay could not map to a block.
# TYPE turnlog_replay_refused_blocks gauge
turnlog_replay_refused_blocks{namespace="team-a",reason="end_user_binding_mismatch"} 0
turnlog_replay_refused_blocks{namespace="team-a",reason="model_binding_mismatch"} 1
turnlog_replay_refused_blocks{namespace="team-a",reason="organization_binding_mismatch"} 0
turnlog_replay_refused_blocks{namespace="team-a",reason="other"} 0
turnlog_replay_refused_blocks{namespace="team-a",reason="prefix_binding_mismatch"} 3
turnlog_replay_refused_blocks{namespace="team-a",reason="unmapped"} 1
turnlog_replay_refused_blocks{namespace="team-b",reason="end_user_binding_mismatch"} 0
turnlog_replay_refused_blocks{namespace="team-b",reason="model_binding_mismatch"} 0
turnlog_replay_refused_blocks{namespace="team-b",reason="organization_binding_mismatch"} 0
turnlog_replay_refused_blocks{namespace="team-b",reason="other"} 0
turnlog_replay_refused_blocks{namespace="team-b",reason="prefix_binding_mismatch"} 0
turnlog_replay_refused_blocks{namespace="team-b",reason="unmapped"} 0
# HELP turnlog_sessionforks SessionForks by their Succeeded condition: its status (Unknown while forking, True, False) and reason.
# TYPE turnlog_sessionforks gauge
turnlog_sessionforks{namespace="team-b",reason="",succeeded="Unknown"} 1
# HELP turnlog_sessions Sessions by their Ready condition: its status (True, False, or Unknown before the first reconcile) and reason, and the store spec.storage.store names.
# TYPE turnlog_sessions gauge
turnlog_sessions{namespace="team-a",ready="False",reason="WorkerFailedPermanently",store="archive"} 1
turnlog_sessions{namespace="team-a",ready="True",reason="Current",store="default"} 2
turnlog_sessions{namespace="team-b",ready="Unknown",reason="",store="default"} 1
# HELP turnlog_sessions_replay_degraded Sessions whose ReplayDegraded condition is True: replay sent at least one of their messages provider-neutral.
# TYPE turnlog_sessions_replay_degraded gauge
turnlog_sessions_replay_degraded{namespace="team-a"} 2
turnlog_sessions_replay_degraded{namespace="team-b"} 0
`
	if err := testutil.GatherAndCompare(registry, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(registry); err != nil || n != 0 {
		t.Fatalf("after the manager stopped leading: %d series (%v), want none", n, err)
	}
}
