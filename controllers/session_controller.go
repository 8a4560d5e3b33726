package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/outcome"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/turnlog"
	"github.com/turnlog/turnlog/internal/worker"
)

// SessionReconciler keeps a Session's status a summary of its log, and its
// derived data (assembly, replay) current with the log's finished turns.
type SessionReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Stores   Stores
	Workers  Workers
	// PollInterval is how often a Session is looked at without a nudge: the
	// safety net for appends made without setting turnlog.dev/requested-at.
	// A Session current with its log backs off from it to MaxPollInterval
	// while the log stays quiet (session_poll.go).
	PollInterval, MaxPollInterval time.Duration
	// MaxWorkerFailures is how many failed attempts a worker run gets
	// before it is given up until a nudge or a spec change; 0 is no limit.
	MaxWorkerFailures int32
	// DeletionTimeout bounds how long a deleted Session waits for its log
	// to be deleted before it is released with the log left in place.
	DeletionTimeout time.Duration
	// StoreTimeout bounds the store requests of one look at a Session. A
	// store that accepts connections and never answers would otherwise
	// hold the reconcile, and with it every other Session queued behind
	// it, for as long as the SDK keeps waiting (S3's has no response
	// timeout). 0 is no bound.
	StoreTimeout time.Duration

	// queue is the controller's fair queue (fair_queue.go); watchdog, if
	// set, bounds and tracks its reconciles (watchdog.go).
	queue    *fairQueue
	watchdog *watchdog
	// wakeups are the Sessions a freed local worker slot is for
	// (slots.wake).
	wakeups wakeups
	// orphans records the logs deletion leaves in a failing store; nil:
	// only the LogOrphaned Event says where they are.
	orphans *orphanLedger

	// APIReader reads a Session the cache is behind on (catchUp); written
	// is the resourceVersion of each Session's last status write (key:
	// UID).
	APIReader client.Reader
	written   sync.Map

	// reported remembers the last results each Session's Events were raised
	// for (key: UID, then the task or failed run), because the status a reconcile starts from
	// may come from a cache that has not seen the previous reconcile's
	// patch yet, and the same results must not be announced twice.
	reported sync.Map
}

// sessionScope is what the steps of one reconcile share.
type sessionScope struct {
	session *turnlogv1.Session
	// before is the status as the reconcile found it, to patch only what
	// changed.
	before turnlogv1.SessionStatus

	store    *SessionStore
	location sessionlog.Location
	log      derived.Log
	head     sessionlog.HeadInfo
	target   turnlog.Adapter

	assembly, replay *derived.Summary
	// pending is the work still to do, set once the log has been looked at.
	pending derived.Task

	// ready is the Ready condition the steps settled on; nil means Current.
	ready  *condition
	result ctrl.Result
}

// condition is the reason and message of a condition a step settled on.
type condition struct{ reason, message string }

// Reconcile runs the steps for one Session and writes its status once.
func (r *SessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.reconcile(ctx, req).Result()
}

func (r *SessionReconciler) reconcile(ctx context.Context, req ctrl.Request) outcome.Outcome {
	session := &turnlogv1.Session{}
	if err := r.Get(ctx, req.NamespacedName, session); err != nil {
		return outcome.Retry(client.IgnoreNotFound(err))
	}
	if err := r.catchUp(ctx, session); err != nil {
		return outcome.Retry(client.IgnoreNotFound(err))
	}
	r.queue.reportHeld(req, session, r.Recorder)
	if !session.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, session)
	}
	if controllerutil.AddFinalizer(session, turnlogv1.FinalizerRetention) {
		// First of all, so that deleting the Session always goes through
		// spec.retention.
		if err := r.Update(ctx, session); err != nil {
			// A conflict means a newer version exists, whose watch event
			// brings this Session back; it is not worth an error.
			return outcome.Retry(ignoreConflict(err))
		}
	}
	// The looks at the store run under StoreTimeout; status is written,
	// and the work run, under the reconcile's own context, so a store that
	// timed out is still reported.
	storeCtx, cancel := ctx, context.CancelFunc(func() {})
	if r.StoreTimeout > 0 {
		storeCtx, cancel = context.WithTimeout(ctx, r.StoreTimeout)
	}
	defer cancel()
	if wait, idle := r.reconcileIdle(storeCtx, session); idle {
		return outcome.Wait(wait)
	}

	s := &sessionScope{session: session, before: *session.Status.DeepCopy()}
	err := r.runSteps(ctx, storeCtx, s)
	if perr := r.patchStatus(ctx, s, err); perr != nil {
		err = errors.Join(err, perr)
	}
	return r.outcome(s, err)
}

// catchUp reads the Session from the API server instead of the cache when
// the cache has not shown this manager's last status write of it. A worker
// run ends milliseconds after the reconcile that started it patched the
// status, and the reconcile it wakes would otherwise start from the status
// before that patch: a merge patch against it leaves out the fields that
// look unchanged, and the status the previous patch wrote (a run waiting)
// would stay until the next poll.
func (r *SessionReconciler) catchUp(ctx context.Context, session *turnlogv1.Session) error {
	written, ok := r.written.Load(session.UID)
	if !ok || written == session.ResourceVersion || r.APIReader == nil {
		return nil
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(session), session); err != nil {
		return err
	}
	r.written.Store(session.UID, session.ResourceVersion)
	return nil
}

// runSteps runs the steps until one fails or settles the Ready condition.
func (r *SessionReconciler) runSteps(ctx, storeCtx context.Context, s *sessionScope) error {
	for _, step := range []struct {
		run func(context.Context, *sessionScope) error
		ctx context.Context
	}{
		{r.reconcileLog, storeCtx},
		{r.reconcileDerived, storeCtx},
		{r.reconcileWork, ctx},
	} {
		if err := step.run(step.ctx, s); err != nil || s.ready != nil {
			return err
		}
	}
	return nil
}

// outcome classifies how the steps ended. A failure is retried with the
// controller's backoff, which is capped at the poll interval
// (SetupWithManager); a Session that needs an operator or a nudge stalls;
// any other waits for its next look.
func (r *SessionReconciler) outcome(s *sessionScope, err error) outcome.Outcome {
	if err != nil {
		return outcome.Retry(err)
	}
	wait := s.requeue(r.nextPoll(s))
	if s.ready != nil && stalls(s.ready.reason) {
		return outcome.Stall(wait)
	}
	return outcome.Wait(wait)
}

// stalls: a Session with this Ready reason cannot go on until someone acts
// (the operator configures its store, someone nudges it or changes its
// spec); until then it is only polled.
func stalls(reason string) bool {
	return reason == turnlogv1.ReasonStoreNotFound || reason == turnlogv1.ReasonWorkerFailedPermanently
}

// requeue keeps the shortest wait a step asked for, bounded by the poll
// interval.
func (s *sessionScope) requeue(poll time.Duration) time.Duration {
	if s.result.RequeueAfter == 0 || s.result.RequeueAfter > poll {
		return poll
	}
	return s.result.RequeueAfter
}

// reconcileLog opens the Session's log and reads its head: a listing and
// the last segments, never the whole log.
func (r *SessionReconciler) reconcileLog(ctx context.Context, s *sessionScope) error {
	session := s.session
	name := session.Spec.Storage.StoreName()
	st, err := r.Stores.Store(ctx, name)
	if err != nil {
		s.ready = storeProblem(ctx, name, "opening the store", err)
		var notFound *StoreNotFoundError
		if errors.As(err, &notFound) {
			// Not worth retrying until the operator configures the store,
			// which restarts the manager.
			return nil
		}
		return err
	}
	s.store, s.location = st, st.Location(session)
	log, err := st.Logs.Log(s.location)
	if err != nil {
		s.ready = &condition{turnlogv1.ReasonStoreUnavailable, err.Error()}
		return err
	}
	s.log = derived.StoreLog{Log: log}
	session.Status.Location = statusLocation(name, s.location)
	s.head, err = log.Head(ctx)
	if _, bad := errors.AsType[*sessionlog.DataError](err); bad && stillSeeding(session) {
		// The SessionFork controller copies a prefix's segments several at
		// a time, so until it is done the child's log may have gaps; it
		// nudges the child when the copy is complete.
		from := session.Spec.ForkedFrom
		s.ready = &condition{turnlogv1.ReasonSeeding, fmt.Sprintf("copying seq 0..%d from Session %s", from.CutSeq, from.Session)}
		return nil
	}
	if err != nil {
		s.ready = storeProblem(ctx, name, "reading the log's head", err)
		return err
	}
	applyHead(&session.Status, s.head)
	noteAppend(session, &s.before, time.Now())

	if from := session.Spec.ForkedFrom; from != nil && s.head.Head() < from.CutSeq {
		// The SessionFork controller is still copying the source's prefix
		// and nudges this Session when it is done.
		s.ready = &condition{turnlogv1.ReasonSeeding, fmt.Sprintf("copying seq 0..%d from Session %s", from.CutSeq, from.Session)}
		return nil
	}
	if s.head.Head() < 0 {
		s.ready = &condition{turnlogv1.ReasonEmptyLog, "the log has no events yet"}
	}
	return nil
}

// stillSeeding: session is a fork's child whose status has never shown
// its log reaching the cut.
func stillSeeding(session *turnlogv1.Session) bool {
	from := session.Spec.ForkedFrom
	return from != nil && (session.Status.HeadSeq == nil || *session.Status.HeadSeq < from.CutSeq)
}

// reconcileDerived reads the checkpoints the workers left beside the log,
// puts them in status, raises the Events of results not seen before, and
// decides what work is left.
func (r *SessionReconciler) reconcileDerived(ctx context.Context, s *sessionScope) error {
	s.target = adapterOf(s.session.Spec.Adapter)
	asm, found, err := derived.LoadAssembly(ctx, s.log)
	found, err = r.believe(ctx, s, derived.TaskAssemble, asm, found, err)
	if err != nil {
		s.ready = storeProblem(ctx, s.store.Name, "reading the assembly's results", err)
		return err
	}
	if found {
		s.assembly = &asm
		r.applyAssembly(s)
	}
	rep, found, err := derived.LoadReplay(ctx, s.log, s.target)
	found, err = r.believe(ctx, s, derived.TaskReplay, rep, found, err)
	if err != nil {
		s.ready = storeProblem(ctx, s.store.Name, "reading the replay's results", err)
		return err
	}
	if found {
		s.replay = &rep
		r.applyReplay(s)
	}

	s.pending = ""
	head := s.head.Head()
	lastEnd := int64(-1)
	if s.head.LastTurnEnd != nil {
		lastEnd = s.head.LastTurnEnd.Seq
	}
	switch {
	case s.assembly == nil || s.assembly.ScannedThrough < head:
		s.pending = derived.TaskAssemble
	case lastEnd >= 0 && (s.replay == nil || s.replay.ThroughSeq < s.settled()):
		s.pending = derived.TaskReplay
	}
	return nil
}

// settled is the last seq replay can take in: the head when no turn is
// open (events between turns, such as a compaction after the last turn,
// are settled as they come), else the last turn/end.
func (s *sessionScope) settled() int64 {
	if s.head.LastTurnEnd == nil {
		return -1
	}
	if !s.head.TurnOpen {
		return s.head.Head()
	}
	return s.head.LastTurnEnd.Seq
}

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

// workerInvocation is what the Session's worker runs of task are told,
// from its spec, its store and its location.
func workerInvocation(session *turnlogv1.Session, task derived.Task, storeURL string, loc sessionlog.Location) worker.Invocation {
	inv := worker.Invocation{Task: task, StoreURL: storeURL, Location: loc, Target: adapterOf(session.Spec.Adapter)}
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
	return fmt.Sprintf("through=%d target=%s/%s/%s/%s/%s", s.settled(), t.Kind, t.API, t.Provider, t.Model, t.ReleaseLine)
}

// retryBackoff is the wait before retrying a failed run: 5s doubling to 5m.
func retryBackoff(failures int32) time.Duration {
	d := 5 * time.Second
	for i := int32(1); i < failures && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

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

func adapterOf(a turnlogv1.Adapter) turnlog.Adapter {
	return turnlog.Adapter{Kind: a.Kind, API: a.API, Provider: a.Provider, Model: a.Model, ReleaseLine: a.ReleaseLine, RefusedBlocks: a.RefusedBlocks}
}

// Permissions on Sessions.
// +kubebuilder:rbac:groups=turnlog.dev,resources=sessions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=turnlog.dev,resources=sessions/status,verbs=get;patch
// +kubebuilder:rbac:groups=turnlog.dev,resources=sessions/finalizers,verbs=update
// The admission policy config/admission lets only holders of this custom
// verb set spec.forkedFrom (the SessionFork controller does, on children).
// +kubebuilder:rbac:groups=turnlog.dev,resources=sessions/forkedfrom,verbs=set
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler. A Session is reconciled when
// its spec changes, when its nudge annotation changes, and when its worker
// run ends or a worker slot frees for it (wakeups); its own status writes
// do not wake it.
func (r *SessionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&turnlogv1.Session{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Named("session")
	if r.wakeups != nil {
		b = b.WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{}))
	}
	if r.queue == nil {
		r.queue = &fairQueue{}
	}
	var rec reconcile.Reconciler = r
	if r.watchdog != nil {
		rec = r.watchdog.watch("session", r, func() client.Object { return &turnlogv1.Session{} })
	}
	return b.WithOptions(r.queue.options(r.PollInterval)).Complete(rec)
}
