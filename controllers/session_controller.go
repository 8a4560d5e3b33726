package controllers

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/utils/clock"
	"sync"
	"time"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/outcome"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
	"github.com/turnlog/turnlog/internal/store"
	"github.com/turnlog/turnlog/internal/turnlog"
)

// SessionReconciler keeps a Session's status a summary of its log, and its
// derived data (assembly, replay) current with the log's finished turns.
type SessionReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Clock is what spec.deleteAfterIdle is measured against; nil is the
	// real clock (tests step a fake one).
	Clock   clock.PassiveClock
	Stores  Stores
	Workers Workers
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
	// storeWaiters hold the Sessions whose store's breaker is open, and
	// wake them when it closes; nil retries them as any failure.
	storeWaiters *storeWaiters
	// wakeups are the Sessions a freed local worker slot (slots.wake) or
	// a finished worker pod run is for.
	wakeups wakeups
	// orphans records the logs deletion leaves in a failing store; nil:
	// only the LogOrphaned Event says where they are.
	orphans *orphanLedger
	// handover, set when the manager reconciles one shard, hands Sessions
	// over between shards (shards.go).
	handover *handover

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

	// ready is the Ready reason and message the steps settled on, nil if
	// nothing stopped them; summarize derives the conditions from it.
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
	ctx, span := startReconcile(ctx, "Session", req)
	defer span.End()
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
	deleted, expiresIn, err := r.expire(ctx, session)
	if deleted || err != nil {
		return outcome.Retry(err)
	}
	if wait, idle := r.reconcileIdle(storeCtx, session); idle {
		return outcome.Wait(soonest(wait, expiresIn))
	}

	s := &sessionScope{session: session, before: *session.Status.DeepCopy()}
	err = r.runSteps(ctx, storeCtx, s)
	noteExpiry(session)
	if expiresIn > 0 {
		s.result.RequeueAfter = soonest(s.result.RequeueAfter, expiresIn)
	}
	if r.movedAway(ctx, session) {
		return outcome.Wait(0)
	}
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
		if err := traceStep(step.ctx, step.run, s); err != nil || s.ready != nil {
			return err
		}
	}
	return nil
}

// outcome classifies how the steps ended. A failure is retried with the
// controller's backoff, which is capped at the poll interval
// (SetupWithManager); a Session that needs an operator or a nudge stalls
// (readyReasons); any other waits for its next look.
func (r *SessionReconciler) outcome(s *sessionScope, err error) outcome.Outcome {
	if open, ok := errors.AsType[*store.OpenCircuitError](err); ok && r.storeWaiters != nil {
		// Said in the Ready condition (storeProblem) and, once, in the
		// manager's log when the breaker opened.
		return outcome.Wait(r.storeWaiters.wait(open.Store, client.ObjectKeyFromObject(s.session), r.now(), r.PollInterval))
	}
	if err != nil {
		return outcome.Retry(err)
	}
	wait := s.requeue(r.nextPoll(s))
	if readyReasons[s.readyReason()].stalls {
		return outcome.Stall(wait)
	}
	return outcome.Wait(wait)
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
	if err := r.writeManifest(ctx, s, log); err != nil {
		s.ready = storeProblem(ctx, name, "writing the Session's manifest", err)
		return err
	}
	s.head, err = log.Head(ctx)
	if _, bad := errors.AsType[*sessionlog.DataError](err); bad && stillSeeding(session) {
		// Until the SessionFork controller is done, the child's log may
		// have gaps (a copied prefix is written several segments at a
		// time); it nudges the child when it is seeded.
		from := session.Spec.ForkedFrom
		s.ready = &condition{turnlogv1.ReasonSeeding, fmt.Sprintf("seeding seq 0..%d from Session %s", from.CutSeq, from.Session)}
		return nil
	}
	if err != nil {
		s.ready = storeProblem(ctx, name, "reading the log's head", err)
		return err
	}
	applyHead(&session.Status, s.head)
	noteAppend(session, &s.before, r.now())

	if from := session.Spec.ForkedFrom; from != nil && s.head.Head() < from.CutSeq {
		// The SessionFork controller is still seeding the source's prefix
		// and nudges this Session when it is done.
		s.ready = &condition{turnlogv1.ReasonSeeding, fmt.Sprintf("seeding seq 0..%d from Session %s", from.CutSeq, from.Session)}
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
	s.target = sessionio.Target(s.session.Spec.Adapter)
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

	s.pending = s.pendingTask()
	return nil
}

// pendingTask is the work the results leave to do: assembly until it has
// read through the head, then replay until it is through the settled part
// of the log; "" when both are current.
func (s *sessionScope) pendingTask() derived.Task {
	lastEnd := int64(-1)
	if s.head.LastTurnEnd != nil {
		lastEnd = s.head.LastTurnEnd.Seq
	}
	switch {
	case s.assembly == nil || s.assembly.ScannedThrough < s.head.Head():
		return derived.TaskAssemble
	case lastEnd >= 0 && (s.replay == nil || s.replay.ThroughSeq < s.settledThrough()):
		return derived.TaskReplay
	}
	return ""
}

// settledThrough is the last seq replay can take in: the head when no
// turn is open (events between turns, such as a compaction after the last
// turn, are settled as they come), else the last turn/end.
func (s *sessionScope) settledThrough() int64 {
	if s.head.LastTurnEnd == nil {
		return -1
	}
	if !s.head.TurnOpen {
		return s.head.Head()
	}
	return s.head.LastTurnEnd.Seq
}
