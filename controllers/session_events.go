package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/assembler"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/replay"
)

// maxNote is the longest Event note the events.k8s.io API accepts.
const maxNote = 1024

// messageRef refers to one message of a Session's log: the Session, with
// the message's seq as the field path. The events.k8s.io recorder folds
// Events about the same object with the same reason into one series that
// keeps only the first note; the field path keeps one Event per message.
func messageRef(session *turnlogv1.Session, seq int64) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: turnlogv1.GroupVersion.String(), Kind: "Session",
		Namespace: session.Namespace, Name: session.Name, UID: session.UID,
		ResourceVersion: session.ResourceVersion,
		FieldPath:       fmt.Sprintf("log[%d]", seq),
	}
}

// assemblyEvents reports a finished assembly run: one Normal Assembled,
// and a Warning EnvelopeDiscarded per discarded envelope, bounded as the
// worker bounds its Summary, with a last Event counting the rest.
func (r *SessionReconciler) assemblyEvents(session *turnlogv1.Session, a *derived.Summary) {
	r.Recorder.Eventf(session, nil, "Normal", turnlogv1.EventAssembled, "Assemble",
		"assembled through seq %d (%d turns)", a.ThroughSeq, a.Turns)
	listed, total := boundedNew(a)
	for _, d := range listed {
		reason := turnlogv1.EventEnvelopeDiscarded
		if d.Cause == assembler.CodeMessageTooLarge {
			reason = turnlogv1.EventMessageTooLarge
		}
		r.Recorder.Eventf(messageRef(session, d.Seq), nil, "Warning", reason, "Assemble",
			"%s", derived.Truncate(fmt.Sprintf("seq %d: %s", d.Seq, d.Message), maxNote))
	}
	if rest := total - int64(len(listed)); rest > 0 {
		r.Recorder.Eventf(session, nil, "Warning", turnlogv1.EventEnvelopeDiscarded, "Assemble",
			"%d more problems in this run (%d in all): replay envelopes discarded (status.envelopesDiscarded counts them) or responses too large to keep", rest, total)
	}
}

// boundedNew is the diagnostics of a run to raise Events for, at most
// derived.MaxNewDiagnostics, and how many the run found. The worker bounds
// its Summary already, but the Summary comes from a checkpoint in the
// bucket, which anyone who can write the bucket can forge: the bound that
// protects the API server is enforced here.
func boundedNew(sum *derived.Summary) ([]derived.Diagnostic, int64) {
	listed := sum.New[:min(len(sum.New), derived.MaxNewDiagnostics)]
	return listed, max(sum.NewTotal, int64(len(sum.New)))
}

// replayEvents reports a finished replay run: a Warning ReplayDegraded per
// degraded message and a ContextEventNotApplied per context event replay
// could not apply, the first derived.MaxNewDiagnostics of them, then one
// Event with the total, so that a badly degraded log cannot flood the API;
// and a Normal Replayed.
func (r *SessionReconciler) replayEvents(session *turnlogv1.Session, rep *derived.Summary) {
	c := rep.Replay
	adapter := fmt.Sprintf("%s %s/%s/%s", c.Target.Kind, c.Target.API, c.Target.Provider, c.Target.Model)
	listed, total := boundedNew(rep)
	for _, d := range listed {
		switch d.Code {
		case replay.CodeInvalidContextEvent:
			r.Recorder.Eventf(messageRef(session, d.Seq), nil, "Warning", turnlogv1.EventContextEventNotApplied, "Replay", "%s",
				derived.Truncate(fmt.Sprintf("context event at seq %d not applied for %s: %s", d.Seq, adapter, d.Message), maxNote))
			continue
		case replay.CodeReplayStateRefused, replay.CodeRefusalUnmapped:
			r.Recorder.Eventf(messageRef(session, d.Seq), nil, "Warning", turnlogv1.EventReplayStateRefused, "Replay", "%s",
				derived.Truncate(fmt.Sprintf("seq %d for %s: %s", d.Seq, adapter, d.Message), maxNote))
			continue
		}
		r.Recorder.Eventf(messageRef(session, d.Seq), nil, "Warning", turnlogv1.EventReplayDegraded, "Replay", "%s",
			derived.Truncate(fmt.Sprintf("seq %d replayed provider-neutral for %s: cause %s: %s", d.Seq, adapter, d.Cause, d.Message), maxNote))
	}
	switch rest := total - int64(len(listed)); {
	case rest > 0 && c.ContextEventsNotApplied == 0 && len(c.Refused) == 0 && c.RefusalsUnmapped == 0:
		r.Recorder.Eventf(session, nil, "Warning", turnlogv1.EventReplayDegraded, "Replay",
			"%d more messages degraded in this replay run (%d in all, not listed as Events); status.replay.degradedSeqs lists them by cause", rest, total)
	case rest > 0:
		// Some of the problems may be context events not applied or
		// refused blocks.
		r.Recorder.Eventf(session, nil, "Warning", turnlogv1.EventReplayDegraded, "Replay",
			"%d more problems in this replay run (%d in all, not listed as Events): status.replay.degradedSeqs lists the degraded messages by cause, status.replay.contextEventSeqs the context events not applied, status.replay.refusedSeqs the messages whose blocks the provider refused", rest, total)
	}
	if c.RunCompactions > 0 && c.LastCompactionSeq != nil {
		r.Recorder.Eventf(messageRef(session, *c.LastCompactionSeq), nil, "Normal", turnlogv1.EventContextCompacted, "Replay",
			"compaction at seq %d replayed (%d in this run): the transcript now holds %d messages", *c.LastCompactionSeq, c.RunCompactions, c.ContextMessages)
	}
	if c.RunEdits > 0 {
		r.Recorder.Eventf(session, nil, "Normal", turnlogv1.EventContextEdited, "Replay",
			"%d context edits replayed: earlier messages replaced or left out; the transcript holds %d messages", c.RunEdits, c.ContextMessages)
	}
	r.Recorder.Eventf(session, nil, "Normal", turnlogv1.EventReplayed, "Replay",
		"replayed through seq %d for %s: %d native, %d foreign, %d degraded", rep.ThroughSeq, adapter, c.Native, c.Foreign, c.Degraded)
}

// believe decides whether the checkpoint a task's last run left can be
// put in status: it must be readable and fit the log's head (see
// derived.Summary.Check). One that does not is ignored, so the work is done
// again, and reported once per checkpoint: in the manager's log and as a
// Warning CheckpointRejected Event. A store error is returned as it is.
func (r *SessionReconciler) believe(ctx context.Context, s *sessionScope, task derived.Task, sum derived.Summary, found bool, err error) (bool, error) {
	if err == nil && !found {
		return false, nil
	}
	if err == nil {
		err = sum.Check(s.head.Head())
		if err != nil {
			// A run that just finished may have read a head this
			// reconcile has not seen.
			if head, herr := s.log.Head(ctx); herr == nil && head > s.head.Head() {
				err = sum.Check(head)
			}
		}
		if err == nil {
			return true, nil
		}
	} else if !errors.Is(err, derived.ErrUnusable) {
		return false, err
	}
	msg := derived.Truncate(err.Error(), 800)
	if r.firstReport(s.session, "rejected/"+string(task), msg) {
		ctrl.LoggerFrom(ctx).Info("ignoring a checkpoint that does not fit the log", "task", task, "problem", err.Error())
		r.Recorder.Eventf(s.session, nil, "Warning", turnlogv1.EventCheckpointRejected, "Load",
			"the %s checkpoint beside the log is ignored and the work done again: %s", task, msg)
	}
	return false, nil
}
