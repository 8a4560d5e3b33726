package controllers

import (
	"cmp"
	"context"
	"fmt"
	"time"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
)

// reconcileWork runs the pending work: in local mode to the end, assembly
// then replay; in pod mode one run at a time on a worker pod, looking again
// when it ends.
func (r *SessionReconciler) reconcileWork(ctx context.Context, s *sessionScope) error {
	if s.pending == "" {
		s.session.Status.Worker = nil
	}
	for s.pending != "" {
		run := WorkerRun{
			Session:    s.session,
			Invocation: workerInvocation(s.session, s.pending, s.store.URL, s.location),
			Store:      s.store.Name, Log: s.log,
		}
		run.Name = runName(s.session, run.Invocation, s.position(run.Task))
		if busy, err := r.Workers.Busy(ctx, s.session, run.Name); err != nil {
			return err
		} else if busy != "" {
			s.ready = &condition{turnlogv1.ReasonWorkPending, fmt.Sprintf("waiting for worker run %s to finish", busy)}
			return nil
		}
		st := &s.session.Status
		if w := st.Worker; w != nil && w.Name == run.Name && w.Failures > 0 && w.Trigger != trigger(s.session, run.Invocation) {
			// A nudge, a spec change or another command line: the run gets
			// its attempts afresh.
			w.Failures, w.RetryAt, w.Trigger = 0, nil, trigger(s.session, run.Invocation)
		}
		if w := st.Worker; w != nil && w.Name == run.Name && r.MaxWorkerFailures > 0 && w.Failures >= r.MaxWorkerFailures {
			s.ready = workerFailedPermanently(run, w)
			return nil
		}
		if w := st.Worker; w != nil && w.Name == run.Name && w.RetryAt != nil {
			if wait := time.Until(w.RetryAt.Time); wait > 0 {
				s.ready = workerFailed(run, w)
				s.result.RequeueAfter = wait
				return nil
			}
		}
		out, err := r.Workers.Run(ctx, run)
		if err != nil {
			return err
		}
		if out.Queued {
			// Not an attempt: status.worker keeps what it had.
			s.ready = &condition{turnlogv1.ReasonWorkQueued, fmt.Sprintf("%s run %s waits for a worker slot: %s", run.Task, run.Name, out.Message)}
			if r.firstReport(s.session, "queued", run.Name) {
				r.Recorder.Eventf(s.session, nil, "Normal", turnlogv1.EventWorkQueued, "Run", "%s", s.ready.message)
			}
			s.result.RequeueAfter = jittered(cmp.Or(out.RetryAfter, slotRetry))
			return nil
		}
		if out.Done {
			if err := r.reconcileDerived(ctx, s); err != nil {
				return err
			}
			if s.pending != run.Task {
				st.Worker = nil
				continue
			}
			// A log only grows, so a run that finished has caught up with
			// the position it is named for (a head that moved since gives
			// another name). One that did not read the log while objects
			// were missing: count it as a failed attempt, retried with
			// backoff and reported, never waited on for ever.
			out = WorkerOutcome{Failed: true, Attempt: out.Attempt, Message: fmt.Sprintf("%s run %s finished short of %s: %s", run.Task, run.Name, s.position(run.Task), s.reached(run.Task))}
		}
		if st.Worker == nil || st.Worker.Name != run.Name {
			st.Worker = &turnlogv1.WorkerRun{Task: string(run.Task), Name: run.Name}
		}
		st.Worker.Pod = out.Pod
		switch w := st.Worker; {
		case out.Failed && w.FailedAttempt != out.Attempt:
			r.countFailure(s, run, w, out)
			return nil
		case out.Failed:
			// The backoff after this failure is over.
			if err := r.Workers.Retry(ctx, run); err != nil {
				return err
			}
			s.ready = &condition{turnlogv1.ReasonWorkPending, fmt.Sprintf("retrying %s run %s", run.Task, run.Name)}
			s.result.RequeueAfter = time.Second
			return nil
		}
		s.ready = &condition{turnlogv1.ReasonWorkPending, running(run, out)}
		return nil
	}
	return nil
}

// running says where a run that has not finished is.
func running(run WorkerRun, out WorkerOutcome) string {
	switch {
	case out.Waiting && out.Message != "":
		return fmt.Sprintf("%s run %s waits for a worker pod of namespace %s: %s", run.Task, run.Name, run.Session.Namespace, out.Message)
	case out.Waiting:
		return fmt.Sprintf("%s run %s waits for a worker pod of namespace %s", run.Task, run.Name, run.Session.Namespace)
	case out.Pod != "":
		return fmt.Sprintf("%s run %s is running on worker pod %s", run.Task, run.Name, out.Pod)
	}
	return fmt.Sprintf("%s run %s is running", run.Task, run.Name)
}

// reached says how far the results of task are.
func (s *sessionScope) reached(task derived.Task) string {
	if task == derived.TaskAssemble {
		if s.assembly == nil {
			return "no assembly is stored"
		}
		return fmt.Sprintf("the assembly reads through seq %d", s.assembly.ScannedThrough)
	}
	if s.replay == nil {
		return "no replay is stored"
	}
	return fmt.Sprintf("the replay is through seq %d", s.replay.ThroughSeq)
}
