package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
)

// A Session's conditions are derived in one place, here, from what the
// steps found: the Ready reason and message they settled on
// (sessionScope.ready, nil when nothing stopped them), whether the log
// could be read, and the status they filled in. A step sets no condition;
// what a reason makes of the conditions, of how the reconcile ends
// (outcome) and of the polling (session_poll.go) is read from the table
// below, so those rules cannot drift apart. A Session being deleted has
// only its Ready condition set, through setCondition as well.

// readyMeaning is what a reason of the Ready condition means beyond its
// message.
type readyMeaning struct {
	// ready: the condition is True (every other reason is False).
	ready bool
	// settled: the Session waits only for an append, a nudge or a spec
	// change, so its polls back off as its log stays quiet (session_poll.go).
	settled bool
	// stalls: the Session cannot go on until someone acts (the operator
	// configures its store, someone nudges it or changes its spec).
	stalls bool
}

// readyReasons are the reasons the Session controller gives Ready, each
// declared in api/v1alpha1; a reason not listed is False, neither settled
// nor stalled.
var readyReasons = map[string]readyMeaning{
	turnlogv1.ReasonCurrent:                 {ready: true, settled: true},
	turnlogv1.ReasonEmptyLog:                {ready: true, settled: true},
	turnlogv1.ReasonWorkerFailedPermanently: {settled: true, stalls: true},
	turnlogv1.ReasonStoreNotFound:           {stalls: true},
	turnlogv1.ReasonSeeding:                 {},
	turnlogv1.ReasonWorkPending:             {},
	turnlogv1.ReasonWorkQueued:              {},
	turnlogv1.ReasonWorkerFailed:            {},
	turnlogv1.ReasonStoreUnavailable:        {},
	turnlogv1.ReasonObjectRefused:           {},
	turnlogv1.ReasonDeletionBlocked:         {},
}

// readyStatus is the status of a Ready condition with reason.
func readyStatus(reason string) metav1.ConditionStatus {
	if readyReasons[reason].ready {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// readyReason is the reason the steps settled Ready on.
func (s *sessionScope) readyReason() string {
	if s.ready != nil {
		return s.ready.reason
	}
	return turnlogv1.ReasonCurrent
}

// sessionConditions are the Session's conditions, each derived by one
// function from the step results. Every one is set on every pass, so a
// user never sees a condition go missing.
var sessionConditions = []struct {
	typ    string
	derive func(*sessionScope) (metav1.ConditionStatus, condition)
}{
	{turnlogv1.ConditionReady, readyCondition},
	{turnlogv1.ConditionAssembled, assembledCondition},
	{turnlogv1.ConditionReplayDegraded, replayDegradedCondition},
}

// summarize sets the Session's conditions from the step results, and
// moves status.observedGeneration to its generation after a pass without
// error (reconcileErr nil): only such a pass has looked at all of it.
func summarize(s *sessionScope, reconcileErr error) {
	for _, c := range sessionConditions {
		status, found := c.derive(s)
		setCondition(s.session, c.typ, status, found)
	}
	if reconcileErr == nil {
		s.session.Status.ObservedGeneration = s.session.Generation
	}
}

// setCondition sets one of session's conditions, for its generation.
func setCondition(session *turnlogv1.Session, typ string, status metav1.ConditionStatus, c condition) {
	meta.SetStatusCondition(&session.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: c.reason, Message: derived.Truncate(c.message, 1024),
		ObservedGeneration: session.Generation,
	})
}

// readyCondition: what the steps settled on, or Current when nothing
// stopped them.
func readyCondition(s *sessionScope) (metav1.ConditionStatus, condition) {
	if s.ready != nil {
		return readyStatus(s.ready.reason), *s.ready
	}
	msg := "derived data is current with the log"
	if h := s.session.Status.HeadSeq; h != nil {
		msg = fmt.Sprintf("assembled and replayed through the last turn/end; head is seq %d", *h)
	}
	return metav1.ConditionTrue, condition{turnlogv1.ReasonCurrent, msg}
}

// assembledCondition: whether every turn that ended is assembled; Unknown,
// for Ready's reason, when the log could not be read.
func assembledCondition(s *sessionScope) (metav1.ConditionStatus, condition) {
	st := &s.session.Status
	lastEnd := lastTurnEnd(st)
	switch {
	case s.log == nil:
		return metav1.ConditionUnknown, condition{s.readyReason(), "the log could not be read"}
	case lastEnd < 0:
		return metav1.ConditionTrue, condition{turnlogv1.ReasonAssembled, "no turn has ended yet"}
	case st.AssembledThroughSeq != nil && *st.AssembledThroughSeq >= lastEnd:
		return metav1.ConditionTrue, condition{turnlogv1.ReasonAssembled,
			fmt.Sprintf("every response through seq %d is assembled", *st.AssembledThroughSeq)}
	}
	return metav1.ConditionFalse, condition{turnlogv1.ReasonAssemblyPending,
		fmt.Sprintf("turns through seq %d are not assembled yet", lastEnd)}
}

// replayDegradedCondition: whether the last replay sent a message
// provider-neutral; Unknown until there is a replay, or a log with no
// turn ended to say none is needed.
func replayDegradedCondition(s *sessionScope) (metav1.ConditionStatus, condition) {
	switch rep := s.session.Status.Replay; {
	case rep != nil && rep.Degraded > 0:
		return metav1.ConditionTrue, condition{turnlogv1.ReasonMessagesDegraded,
			fmt.Sprintf("%d of %d assistant messages through seq %d were replayed provider-neutral because their replay state was unusable; see status.replay.degradedSeqs",
				rep.Degraded, rep.Native+rep.Foreign, rep.ThroughSeq)}
	case rep != nil:
		return metav1.ConditionFalse, condition{turnlogv1.ReasonNoneDegraded,
			fmt.Sprintf("every usable replay state through seq %d was used", rep.ThroughSeq)}
	case lastTurnEnd(&s.session.Status) < 0 && s.log != nil:
		return metav1.ConditionFalse, condition{turnlogv1.ReasonNoneDegraded, "no turn has ended yet"}
	}
	return metav1.ConditionUnknown, condition{turnlogv1.ReasonReplayPending, "the transcript has not been replayed yet"}
}

// lastTurnEnd is the seq of the last turn/end in status, -1 if none.
func lastTurnEnd(st *turnlogv1.SessionStatus) int64 {
	if st.LastTurnEnd != nil {
		return st.LastTurnEnd.Seq
	}
	return -1
}
