package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// patchStatus writes the status once, from what the steps found.
func (r *SessionReconciler) patchStatus(ctx context.Context, s *sessionScope, reconcileErr error) error {
	r.reportRefused(s)
	base := s.session.DeepCopy()
	base.Status = s.before
	setSessionConditions(s)
	if reconcileErr == nil {
		s.session.Status.ObservedGeneration = s.session.Generation
	}
	if equality.Semantic.DeepEqual(s.before, s.session.Status) {
		return nil
	}
	if err := r.Status().Patch(ctx, s.session, client.MergeFrom(base)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch status: %w", err)
	}
	r.written.Store(s.session.UID, s.session.ResourceVersion)
	return nil
}

// applyHead puts what the log's head says into status.
func applyHead(st *turnlogv1.SessionStatus, h sessionlog.HeadInfo) {
	st.HeadSeq = nil
	if head := h.Head(); head >= 0 {
		st.HeadSeq = &head
	}
	st.Turns = h.Turns
	st.LastTurnEnd = nil
	if e := h.LastTurnEnd; e != nil {
		st.LastTurnEnd = &turnlogv1.TurnEnd{Seq: e.Seq, Turn: e.Turn, Reason: e.Reason}
	}
}

// applyAssembly puts the last assembly run's results into status, with
// Events if they are new to this Session.
func (r *SessionReconciler) applyAssembly(s *sessionScope) {
	st := &s.session.Status
	a := s.assembly
	previous := int64(-1)
	if st.AssembledThroughSeq != nil {
		previous = *st.AssembledThroughSeq
	}
	if a.ThroughSeq >= 0 {
		through := a.ThroughSeq
		st.AssembledThroughSeq = &through
	}
	st.EnvelopesDiscarded = a.EnvelopesDiscarded
	if a.ThroughSeq > previous && r.firstReport(s.session, "assemble", fmt.Sprint(a.ThroughSeq)) {
		r.assemblyEvents(s.session, a)
	}
}

// applyReplay puts the last replay's results into status, with Events if
// they are new to this Session.
func (r *SessionReconciler) applyReplay(s *sessionScope) {
	st := &s.session.Status
	rep := s.replay
	if rep.Replay == nil || rep.ThroughSeq < 0 {
		return
	}
	c := rep.Replay
	summary := &turnlogv1.ReplaySummary{
		ThroughSeq: rep.ThroughSeq,
		Adapter: turnlogv1.Adapter{Kind: c.Target.Kind, API: c.Target.API, Provider: c.Target.Provider, Model: c.Target.Model, ReleaseLine: c.Target.ReleaseLine,
			RefusedBlocks: c.Target.RefusedBlocks},
		Native: c.Native, Foreign: c.Foreign, Degraded: c.Degraded,
		OrphanToolResults: c.OrphanToolResults,
		ContextMessages:   c.ContextMessages, LastCompactionSeq: c.LastCompactionSeq,
		Compactions: c.Compactions, ContextEdits: c.Edits,
		ContextEventsNotApplied: c.ContextEventsNotApplied, ContextEventSeqs: capSeqs(c.ContextEventSeqs),
		Refused: turnlogv1.RefusedCounts{
			PrefixBindingMismatch:       c.Refused["prefix_binding_mismatch"],
			ModelBindingMismatch:        c.Refused["model_binding_mismatch"],
			OrganizationBindingMismatch: c.Refused["organization_binding_mismatch"],
			EndUserBindingMismatch:      c.Refused["end_user_binding_mismatch"],
			Other:                       c.Refused[string(replay.CauseOtherReason)],
			Unmapped:                    c.RefusalsUnmapped,
			Dropped:                     c.RefusedDropped,
		},
		RefusedSeqs: turnlogv1.RefusedSeqs{
			PrefixBindingMismatch:       capSeqs(c.RefusedSeqs["prefix_binding_mismatch"]),
			ModelBindingMismatch:        capSeqs(c.RefusedSeqs["model_binding_mismatch"]),
			OrganizationBindingMismatch: capSeqs(c.RefusedSeqs["organization_binding_mismatch"]),
			EndUserBindingMismatch:      capSeqs(c.RefusedSeqs["end_user_binding_mismatch"]),
			Other:                       capSeqs(c.RefusedSeqs[string(replay.CauseOtherReason)]),
		},
		DegradedSeqs: turnlogv1.DegradedSeqs{
			Kind:      capSeqs(c.DegradedSeqs["kind"]),
			Version:   capSeqs(c.DegradedSeqs["version"]),
			Malformed: capSeqs(c.DegradedSeqs["malformed"]),
			Shape:     capSeqs(c.DegradedSeqs["shape"]),
		},
	}
	isNew := st.Replay == nil || st.Replay.ThroughSeq < summary.ThroughSeq || st.Replay.Adapter != summary.Adapter
	st.Replay = summary
	if isNew && r.firstReport(s.session, "replay", fmt.Sprintf("%d %v", summary.ThroughSeq, summary.Adapter)) {
		r.replayEvents(s.session, rep)
	}
}

// firstReport records that the results of task at position are announced,
// and reports whether they had not been before.
func (r *SessionReconciler) firstReport(session *turnlogv1.Session, task, position string) bool {
	return firstTime(&r.reported, string(session.UID)+"/"+task, position)
}

// firstTime stores value under key in m and reports whether it differs
// from what was there: what keeps an Event from being raised twice for one
// result when a reconcile runs on a cache behind the object's status.
func firstTime(m *sync.Map, key any, value string) bool {
	previous, loaded := m.Swap(key, value)
	return !loaded || previous != value
}

func capSeqs(seqs []int64) []int64 {
	if len(seqs) > turnlogv1.MaxDegradedSeqs {
		seqs = seqs[:turnlogv1.MaxDegradedSeqs]
	}
	return slices.Clone(seqs)
}

// setSessionConditions sets Ready, Assembled and ReplayDegraded, every one
// of them on every pass, so a user never sees a condition go missing.
func setSessionConditions(s *sessionScope) {
	st := &s.session.Status
	gen := s.session.Generation
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: derived.Truncate(msg, 1024), ObservedGeneration: gen})
	}

	switch ready := s.ready; {
	case ready == nil:
		msg := "derived data is current with the log"
		if h := st.HeadSeq; h != nil {
			msg = fmt.Sprintf("assembled and replayed through the last turn/end; head is seq %d", *h)
		}
		set(turnlogv1.ConditionReady, metav1.ConditionTrue, turnlogv1.ReasonCurrent, msg)
	case ready.reason == turnlogv1.ReasonEmptyLog:
		set(turnlogv1.ConditionReady, metav1.ConditionTrue, ready.reason, ready.message)
	default:
		set(turnlogv1.ConditionReady, metav1.ConditionFalse, ready.reason, ready.message)
	}

	lastEnd := int64(-1)
	if st.LastTurnEnd != nil {
		lastEnd = st.LastTurnEnd.Seq
	}
	switch {
	case s.log == nil:
		set(turnlogv1.ConditionAssembled, metav1.ConditionUnknown, s.readyReason(), "the log could not be read")
	case lastEnd < 0:
		set(turnlogv1.ConditionAssembled, metav1.ConditionTrue, turnlogv1.ReasonAssembled, "no turn has ended yet")
	case st.AssembledThroughSeq != nil && *st.AssembledThroughSeq >= lastEnd:
		set(turnlogv1.ConditionAssembled, metav1.ConditionTrue, turnlogv1.ReasonAssembled,
			fmt.Sprintf("every response through seq %d is assembled", *st.AssembledThroughSeq))
	default:
		set(turnlogv1.ConditionAssembled, metav1.ConditionFalse, turnlogv1.ReasonAssemblyPending,
			fmt.Sprintf("turns through seq %d are not assembled yet", lastEnd))
	}

	switch rep := st.Replay; {
	case rep != nil && rep.Degraded > 0:
		set(turnlogv1.ConditionReplayDegraded, metav1.ConditionTrue, turnlogv1.ReasonMessagesDegraded,
			fmt.Sprintf("%d of %d assistant messages through seq %d were replayed provider-neutral because their replay state was unusable; see status.replay.degradedSeqs",
				rep.Degraded, rep.Native+rep.Foreign, rep.ThroughSeq))
	case rep != nil:
		set(turnlogv1.ConditionReplayDegraded, metav1.ConditionFalse, turnlogv1.ReasonNoneDegraded,
			fmt.Sprintf("every usable replay state through seq %d was used", rep.ThroughSeq))
	case lastEnd < 0 && s.log != nil:
		set(turnlogv1.ConditionReplayDegraded, metav1.ConditionFalse, turnlogv1.ReasonNoneDegraded, "no turn has ended yet")
	default:
		set(turnlogv1.ConditionReplayDegraded, metav1.ConditionUnknown, turnlogv1.ReasonReplayPending, "the transcript has not been replayed yet")
	}
}

func (s *sessionScope) readyReason() string {
	if s.ready != nil {
		return s.ready.reason
	}
	return turnlogv1.ReasonCurrent
}
