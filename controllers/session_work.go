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
		run := s.workerRun(ctx)
		if busy, err := r.Workers.Busy(ctx, s.session, run.Name); err != nil {
			return err
		} else if busy != "" {
			s.ready = &condition{turnlogv1.ReasonWorkPending, fmt.Sprintf("waiting for worker run %s to finish", busy)}
			return nil
		}
		if r.heldBack(s, run) || r.handingOver(s, run) {
			return nil
		}
		out, err := r.Workers.Run(ctx, run)
		if err != nil {
			return err
		}
		if out.Queued {
			r.queued(s, run, out)
			return nil
		}
		if out.Done {
			if err := r.reconcileDerived(ctx, s); err != nil {
				return err
			}
			if s.pending != run.Task {
				s.session.Status.Worker = nil
				continue
			}
			// A log only grows, so a run that finished has caught up with
			// the position it is named for (a head that moved since gives
			// another name). One that did not read the log while objects
			// were missing: count it as a failed attempt, retried with
			// backoff and reported, never waited on for ever.
			out = WorkerOutcome{Failed: true, Attempt: out.Attempt, Message: fmt.Sprintf("%s run %s finished short of %s: %s", run.Task, run.Name, s.position(run.Task), s.reached(run.Task))}
		}
		return r.recordRun(ctx, s, run, out)
	}
	return nil
}

// queued: the run could not start for want of a worker slot. That is not
// an attempt, so status.worker keeps what it had; the wait is announced
// once per run.
func (r *SessionReconciler) queued(s *sessionScope, run WorkerRun, out WorkerOutcome) {
	s.ready = &condition{turnlogv1.ReasonWorkQueued, fmt.Sprintf("%s run %s waits for a worker slot: %s", run.Task, run.Name, out.Message)}
	if r.firstReport(s.session, "queued", run.Name) {
		r.Recorder.Eventf(s.session, nil, "Normal", turnlogv1.EventWorkQueued, "Run", "%s", s.ready.message)
	}
	s.result.RequeueAfter = jittered(cmp.Or(out.RetryAfter, slotRetry))
}

// recordRun puts where an attempt of run stands in status.worker: a
// failure not counted yet is counted (countFailure); one counted already
// is over its backoff, so the run is tried again; any other run is going.
func (r *SessionReconciler) recordRun(ctx context.Context, s *sessionScope, run WorkerRun, out WorkerOutcome) error {
	st := &s.session.Status
	if st.Worker == nil || st.Worker.Name != run.Name {
		st.Worker = &turnlogv1.WorkerRun{Task: string(run.Task), Name: run.Name}
	}
	st.Worker.Pod = out.Pod
	switch w := st.Worker; {
	case out.Failed && w.FailedAttempt != out.Attempt:
		r.countFailure(s, run, w, out)
	case out.Failed:
		if err := r.Workers.Retry(ctx, run); err != nil {
			return err
		}
		s.ready = &condition{turnlogv1.ReasonWorkPending, fmt.Sprintf("retrying %s run %s", run.Task, run.Name)}
		s.result.RequeueAfter = time.Second
	default:
		s.ready = &condition{turnlogv1.ReasonWorkPending, running(run, out)}
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
