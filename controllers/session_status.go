package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/replay"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// patchStatus writes the status once, from what the steps found.
func (r *SessionReconciler) patchStatus(ctx context.Context, s *sessionScope, reconcileErr error) error {
	r.reportRefused(s)
	base := s.session.DeepCopy()
	base.Status = s.before
	summarize(s, reconcileErr)
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
		ThroughSeq: rep.ThroughSeq, Adapter: sessionio.APIAdapter(c.Target),
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
