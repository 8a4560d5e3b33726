package controllers

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/worker"
)

// heldBack: the failures of run, counted in status.worker, keep it from
// another attempt now, because it has used up its attempts or waits out a
// backoff; the Ready condition says which.
func (r *SessionReconciler) heldBack(s *sessionScope, run WorkerRun) bool {
	w := s.session.Status.Worker
	if w == nil || w.Name != run.Name {
		return false
	}
	if w.Failures > 0 && w.Trigger != trigger(s.session, run.Invocation) {
		// A nudge, a spec change or another command line: the run gets
		// its attempts afresh.
		w.Failures, w.RetryAt, w.Trigger = 0, nil, trigger(s.session, run.Invocation)
	}
	if r.MaxWorkerFailures > 0 && w.Failures >= r.MaxWorkerFailures {
		s.ready = workerFailedPermanently(run, w)
		return true
	}
	if w.RetryAt != nil {
		if wait := time.Until(w.RetryAt.Time); wait > 0 {
			s.ready = workerFailed(run, w)
			s.result.RequeueAfter = wait
			return true
		}
	}
	return false
}

// countFailure records a failed attempt of run in w (status.worker), and
// either schedules the next attempt after a backoff or gives the run up
// once it has failed --worker-max-failures times; each is announced once.
func (r *SessionReconciler) countFailure(s *sessionScope, run WorkerRun, w *turnlogv1.WorkerRun, out WorkerOutcome) {
	w.Failures++
	w.FailedAttempt = out.Attempt
	w.Trigger = trigger(s.session, run.Invocation)
	w.Message = derived.Truncate(out.Message, 1024)
	// A reconcile on a cache that has not seen this status yet finds the
	// same failure again; announce it once.
	announce := r.firstReport(s.session, "failed/"+run.Name, fmt.Sprint(out.Attempt))
	if r.MaxWorkerFailures > 0 && w.Failures >= r.MaxWorkerFailures {
		w.RetryAt = nil
		if announce {
			r.Recorder.Eventf(s.session, nil, "Warning", turnlogv1.EventWorkerFailedPermanently, "Run",
				"%s run %s failed %d times and is not retried until the Session is nudged or its spec changes: %s",
				run.Task, run.Name, w.Failures, derived.Truncate(out.Message, 700))
		}
		s.ready = workerFailedPermanently(run, w)
		return
	}
	backoff := retryBackoff(w.Failures)
	w.RetryAt = &metav1.Time{Time: time.Now().Add(backoff).Truncate(time.Second)}
	if announce {
		r.Recorder.Eventf(s.session, nil, "Warning", turnlogv1.EventWorkerFailed, "Run",
			"%s run %s failed (attempt %d): %s", run.Task, run.Name, w.Failures, derived.Truncate(out.Message, 800))
	}
	s.ready = workerFailed(run, w)
	s.result.RequeueAfter = backoff
}

// workerFailed is the Ready condition of a run that failed and waits to be
// retried; status.worker says when.
func workerFailed(run WorkerRun, w *turnlogv1.WorkerRun) *condition {
	return &condition{turnlogv1.ReasonWorkerFailed, fmt.Sprintf("%s run %s failed %d times and is retried with backoff (status.worker.retryAt): %s",
		run.Task, run.Name, w.Failures, w.Message)}
}

// workerFailedPermanently is the Ready condition of a run that used up
// its attempts.
func workerFailedPermanently(run WorkerRun, w *turnlogv1.WorkerRun) *condition {
	return &condition{turnlogv1.ReasonWorkerFailedPermanently, fmt.Sprintf("%s run %s failed %d times and is not retried; nudge the Session (annotation %s) or change its spec to try again: %s",
		run.Task, run.Name, w.Failures, turnlogv1.AnnotationRequestedAt, w.Message)}
}

// trigger names what a run's failures are counted under: the Session's
// generation, the run's command line (a digest) and the Session's last
// nudge. Any of them changing starts the count again: a run given up on by
// a manager that told its workers something else (an earlier release, a
// store under another URL) is tried again by this one.
func trigger(session *turnlogv1.Session, inv worker.Invocation) string {
	return derived.Truncate(fmt.Sprintf("%d/%s/%s", session.Generation, inv.Digest()[:12], session.Annotations[turnlogv1.AnnotationRequestedAt]), 64)
}

// retryBackoff is the wait before retrying a failed run: 5s doubling to 5m.
func retryBackoff(failures int32) time.Duration {
	d := 5 * time.Second
	for i := int32(1); i < failures && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}
