package controllers

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/worker"
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
func (r *SessionReconciler) assemblyEvents(session *turnlogv1.Session, a *worker.Summary) {
	r.Recorder.Eventf(session, nil, "Normal", turnlogv1.EventAssembled, "Assemble",
		"assembled through seq %d (%d turns)", a.ThroughSeq, a.Turns)
	for _, d := range a.New {
		r.Recorder.Eventf(messageRef(session, d.Seq), nil, "Warning", turnlogv1.EventEnvelopeDiscarded, "Assemble",
			"%s", truncate(fmt.Sprintf("seq %d: %s", d.Seq, d.Message), maxNote))
	}
	if rest := a.NewTotal - int64(len(a.New)); rest > 0 {
		r.Recorder.Eventf(session, nil, "Warning", turnlogv1.EventEnvelopeDiscarded, "Assemble",
			"%d more replay envelopes discarded in this run (%d in all); status.envelopesDiscarded counts them", rest, a.NewTotal)
	}
}

// replayEvents reports a finished replay run: a Warning ReplayDegraded per
// degraded message, the first worker.MaxNewDiagnostics of them, then one
// Event with the total, so that a badly degraded log cannot flood the API;
// and a Normal Replayed.
func (r *SessionReconciler) replayEvents(session *turnlogv1.Session, rep *worker.Summary) {
	c := rep.Replay
	adapter := fmt.Sprintf("%s %s/%s/%s", c.Target.Kind, c.Target.API, c.Target.Provider, c.Target.Model)
	for _, d := range rep.New {
		r.Recorder.Eventf(messageRef(session, d.Seq), nil, "Warning", turnlogv1.EventReplayDegraded, "Replay", "%s",
			truncate(fmt.Sprintf("seq %d replayed provider-neutral for %s: cause %s: %s", d.Seq, adapter, d.Cause, d.Message), maxNote))
	}
	if rest := rep.NewTotal - int64(len(rep.New)); rest > 0 {
		r.Recorder.Eventf(session, nil, "Warning", turnlogv1.EventReplayDegraded, "Replay",
			"%d more messages degraded in this replay run (%d in all, not listed as Events); status.replay.degradedSeqs lists them by cause", rest, rep.NewTotal)
	}
	r.Recorder.Eventf(session, nil, "Normal", turnlogv1.EventReplayed, "Replay",
		"replayed through seq %d for %s: %d native, %d foreign, %d degraded", rep.ThroughSeq, adapter, c.Native, c.Foreign, c.Degraded)
}
