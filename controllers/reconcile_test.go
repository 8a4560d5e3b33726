package controllers

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/outcome"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// The pure parts of the reconcilers, without an API server.

// TestSessionOutcome: how a Session reconcile ends, for each way the steps
// can leave it.
func TestSessionOutcome(t *testing.T) {
	r := &SessionReconciler{PollInterval: time.Minute, MaxPollInterval: time.Hour}
	quietForADay := &metav1.MicroTime{Time: time.Now().Add(-24 * time.Hour)}
	for _, c := range []struct {
		name     string
		ready    *condition
		asked    time.Duration
		err      error
		kind     outcome.Kind
		min, max time.Duration
	}{
		{"current and quiet: the idle poll", nil, 0, nil, outcome.Waiting, 54 * time.Minute, time.Hour},
		{"a run going: the poll interval", &condition{turnlogv1.ReasonWorkPending, ""}, 0, nil, outcome.Waiting, time.Minute, time.Minute},
		{"a step asked for sooner", &condition{turnlogv1.ReasonWorkQueued, ""}, 2 * time.Second, nil, outcome.Waiting, 2 * time.Second, 2 * time.Second},
		{"a store the operator has not configured", &condition{turnlogv1.ReasonStoreNotFound, ""}, 0, nil, outcome.Stalled, time.Minute, time.Minute},
		{"a run given up on", &condition{turnlogv1.ReasonWorkerFailedPermanently, ""}, 0, nil, outcome.Stalled, 54 * time.Minute, time.Hour},
		{"a store that failed", &condition{turnlogv1.ReasonStoreUnavailable, ""}, 0, errors.New("timed out"), outcome.Transient, 0, 0},
	} {
		s := &sessionScope{session: &turnlogv1.Session{}, ready: c.ready}
		s.session.Status.LastAppendTime = quietForADay
		s.result.RequeueAfter = c.asked
		o := r.outcome(s, c.err)
		if o.Kind != c.kind || o.After < c.min || o.After > c.max {
			t.Errorf("%s: %s after %s; want %s after %s..%s", c.name, o.Kind, o.After, c.kind, c.min, c.max)
		}
		if res, err := o.Result(); err != nil && !res.IsZero() {
			t.Errorf("%s: a result together with an error", c.name)
		}
	}
}

// TestSettled: which Sessions the idle probe may answer with one request.
func TestSettled(t *testing.T) {
	now := time.Now()
	session := func(status metav1.ConditionStatus, reason string, mutate func(*turnlogv1.Session)) *turnlogv1.Session {
		s := &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		s.Status.ObservedGeneration = 2
		s.Status.LastAppendTime = &metav1.MicroTime{Time: now.Add(-time.Minute)}
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: turnlogv1.ConditionReady, Status: status, Reason: reason, ObservedGeneration: 2})
		if mutate != nil {
			mutate(s)
		}
		return s
	}
	nudge := func(at time.Time) func(*turnlogv1.Session) {
		return func(s *turnlogv1.Session) {
			s.Annotations = map[string]string{turnlogv1.AnnotationRequestedAt: at.UTC().Format(time.RFC3339Nano)}
		}
	}
	given := worker.Invocation{Task: derived.TaskReplay, StoreURL: "s3://logs"}
	gaveUp := func(s *turnlogv1.Session) {
		s.Status.Worker = &turnlogv1.WorkerRun{Name: "r", Failures: 5, Trigger: trigger(s, given)}
	}
	for _, c := range []struct {
		name string
		s    *turnlogv1.Session
		want bool
	}{
		{"current", session(metav1.ConditionTrue, turnlogv1.ReasonCurrent, nil), true},
		{"empty log", session(metav1.ConditionTrue, turnlogv1.ReasonEmptyLog, nil), true},
		{"a nudge answered", session(metav1.ConditionTrue, turnlogv1.ReasonCurrent, nudge(now.Add(-time.Hour))), true},
		{"a nudge not answered yet", session(metav1.ConditionTrue, turnlogv1.ReasonCurrent, nudge(now)), false},
		{"a new generation", session(metav1.ConditionTrue, turnlogv1.ReasonCurrent, func(s *turnlogv1.Session) { s.Generation = 3 }), false},
		{"never appended", session(metav1.ConditionTrue, turnlogv1.ReasonCurrent, func(s *turnlogv1.Session) { s.Status.LastAppendTime = nil }), false},
		{"a run going", session(metav1.ConditionFalse, turnlogv1.ReasonWorkPending, nil), false},
		{"a run queued", session(metav1.ConditionFalse, turnlogv1.ReasonWorkQueued, nil), false},
		{"a run given up on", session(metav1.ConditionFalse, turnlogv1.ReasonWorkerFailedPermanently, gaveUp), true},
		{"a run given up on by a manager with another command line", session(metav1.ConditionFalse, turnlogv1.ReasonWorkerFailedPermanently, func(s *turnlogv1.Session) {
			gaveUp(s)
			s.Status.Worker.Trigger = trigger(s, worker.Invocation{Task: derived.TaskReplay, StoreURL: "s3://logs?region=eu-west-1"})
		}), false},
		{"a run given up on, then nudged", session(metav1.ConditionFalse, turnlogv1.ReasonWorkerFailedPermanently, func(s *turnlogv1.Session) {
			gaveUp(s)
			nudge(now.Add(-time.Hour))(s)
		}), false},
	} {
		if got := settled(c.s, given); got != c.want {
			t.Errorf("%s: settled %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSessionConditions: the three conditions for each state a reconcile
// can leave a Session in; none is ever missing.
func TestSessionConditions(t *testing.T) {
	seq := func(n int64) *int64 { return &n }
	for _, c := range []struct {
		name                         string
		ready                        *condition
		log                          bool
		status                       turnlogv1.SessionStatus
		wantReady, wantAsm, wantDegr string
		wantReadyMsg                 string
	}{
		{"current", nil, true,
			turnlogv1.SessionStatus{HeadSeq: seq(8), LastTurnEnd: &turnlogv1.TurnEnd{Seq: 8}, AssembledThroughSeq: seq(8), Replay: &turnlogv1.ReplaySummary{ThroughSeq: 8}},
			"True/Current", "True/Assembled", "False/NoneDegraded", "head is seq 8"},
		{"no turn ended yet", &condition{turnlogv1.ReasonEmptyLog, "the log has no events yet"}, true, turnlogv1.SessionStatus{},
			"True/EmptyLog", "True/Assembled", "False/NoneDegraded", "no events"},
		{"a run queued", &condition{turnlogv1.ReasonWorkQueued, "assemble run x waits for a worker slot"}, true,
			turnlogv1.SessionStatus{HeadSeq: seq(12), LastTurnEnd: &turnlogv1.TurnEnd{Seq: 12}, AssembledThroughSeq: seq(8)},
			"False/WorkQueued", "False/AssemblyPending", "Unknown/ReplayPending", "waits for a worker slot"},
		{"degraded", nil, true,
			turnlogv1.SessionStatus{HeadSeq: seq(8), LastTurnEnd: &turnlogv1.TurnEnd{Seq: 8}, AssembledThroughSeq: seq(8), Replay: &turnlogv1.ReplaySummary{ThroughSeq: 8, Degraded: 1, Native: 2}},
			"True/Current", "True/Assembled", "True/MessagesDegraded", ""},
		{"the store is unreadable", &condition{turnlogv1.ReasonStoreUnavailable, `store "default" is unavailable`}, false, turnlogv1.SessionStatus{},
			"False/StoreUnavailable", "Unknown/StoreUnavailable", "Unknown/ReplayPending", "unavailable"},
	} {
		s := &sessionScope{session: &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: c.status}, ready: c.ready}
		if c.log {
			s.log = derived.StoreLog{}
		}
		summarize(s, nil)
		conds := s.session.Status.Conditions
		got := []string{cond(conds, turnlogv1.ConditionReady), cond(conds, turnlogv1.ConditionAssembled), cond(conds, turnlogv1.ConditionReplayDegraded)}
		if want := []string{c.wantReady, c.wantAsm, c.wantDegr}; !slices.Equal(got, want) {
			t.Errorf("%s: conditions %v, want %v", c.name, got, want)
		}
		if r := meta.FindStatusCondition(conds, turnlogv1.ConditionReady); !strings.Contains(r.Message, c.wantReadyMsg) || r.ObservedGeneration != 1 {
			t.Errorf("%s: Ready %q (generation %d), want it to say %q for generation 1", c.name, r.Message, r.ObservedGeneration, c.wantReadyMsg)
		}
	}
}

// TestPendingTask: what work the results leave, for each way they can
// stand against the log's head.
func TestPendingTask(t *testing.T) {
	scanned := func(seq int64) *derived.Summary { return &derived.Summary{ScannedThrough: seq} }
	through := func(seq int64) *derived.Summary { return &derived.Summary{ThroughSeq: seq} }
	ended := func(next, end int64, open bool) sessionlog.HeadInfo {
		return sessionlog.HeadInfo{Next: next, TurnOpen: open, LastTurnEnd: &sessionlog.TurnEnd{Seq: end}}
	}
	for _, c := range []struct {
		name             string
		head             sessionlog.HeadInfo
		assembly, replay *derived.Summary
		want             derived.Task
	}{
		{"never assembled", sessionlog.HeadInfo{Next: 4, TurnOpen: true}, nil, nil, derived.TaskAssemble},
		{"appended to since the assembly", ended(10, 9, false), scanned(7), through(7), derived.TaskAssemble},
		{"no turn has ended", sessionlog.HeadInfo{Next: 4, TurnOpen: true}, scanned(3), nil, ""},
		{"a turn ended, never replayed", ended(10, 9, false), scanned(9), nil, derived.TaskReplay},
		{"replayed through the last turn/end", ended(10, 9, false), scanned(9), through(9), ""},
		{"events after the last turn, between turns", ended(12, 9, false), scanned(11), through(9), derived.TaskReplay},
		{"events after the last turn, in an open turn", ended(12, 9, true), scanned(11), through(9), ""},
	} {
		s := &sessionScope{head: c.head, assembly: c.assembly, replay: c.replay}
		if got := s.pendingTask(); got != c.want {
			t.Errorf("%s: pending %q, want %q", c.name, got, c.want)
		}
	}
}
