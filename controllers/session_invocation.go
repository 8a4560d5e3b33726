package controllers

import (
	"context"
	"fmt"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// workerRun is the run of the pending task: what it is told, and the
// name that makes it the same run in every reconcile until its position
// or its command line changes. It carries the trace context of ctx's span
// (the work step's), whose child the run's span is, on a worker pod as in
// this process; the name leaves it out (Invocation.Digest), so each
// reconcile, under its own trace, finds the same run.
func (s *sessionScope) workerRun(ctx context.Context) WorkerRun {
	run := WorkerRun{
		Session:    s.session,
		Invocation: workerInvocation(s.session, s.pending, s.store.URL, s.location).WithTrace(ctx),
		Store:      s.store.Name, Log: s.log,
	}
	run.Name = runName(s.session, run.Invocation, s.position(run.Task))
	return run
}

// workerInvocation is what the Session's worker runs of task are told,
// from its spec, its store and its location.
func workerInvocation(session *turnlogv1.Session, task derived.Task, storeURL string, loc sessionlog.Location) worker.Invocation {
	inv := worker.Invocation{Task: task, StoreURL: storeURL, Location: loc, Target: sessionio.Target(session.Spec.Adapter)}
	if from := session.Spec.ForkedFrom; from != nil && task == derived.TaskAssemble {
		// The turns through the cut are in its sources' traces.
		inv.ForkSource, inv.ForkCut = cutTurnOwner(session), from.CutSeq
	}
	if from := session.Spec.ForkedFrom; from != nil && task == derived.TaskReplay && inv.Target.DropsRefused() {
		// The responses through the cut were requested by the source's
		// host, from its transcript (docs/log-format.md): with every block
		// kept unless the source itself left refused blocks out.
		inv.SentKeptThrough = from.KeptThrough()
	}
	return inv
}

// position is what makes a run unique: the head assembly catches up with,
// or the turn/end and target replay catches up with.
func (s *sessionScope) position(task derived.Task) string {
	if task == derived.TaskAssemble {
		return fmt.Sprintf("head=%d", s.head.Head())
	}
	t := s.target
	return fmt.Sprintf("through=%d target=%s/%s/%s/%s/%s", s.settledThrough(), t.Kind, t.API, t.Provider, t.Model, t.ReleaseLine)
}
