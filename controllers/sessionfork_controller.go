package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/forkcut"
	"github.com/turnlog/turnlog/internal/outcome"
	"github.com/turnlog/turnlog/internal/sessionio"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// SessionForkReconciler materialises a SessionFork as a child Session whose
// log is the source's prefix through the cut.
//
// Each step can be repeated after a crash at any point and lead to the same
// end: the child's name is fixed by the SessionFork, a Session of that name
// is taken as the child only if its spec.forkedFrom names this fork (by
// name and UID; only the manager can set forkedFrom), the
// prefix copy completes a partial copy of the same prefix, and the fork's
// status is written last.
type SessionForkReconciler struct {
	client.Client
	// Sessions reads the source and child Sessions; nil is the Client.
	// A manager of one shard reads them from the API server, as they may
	// be in other shards.
	Sessions client.Reader
	Recorder events.EventRecorder
	Stores   Stores
	// PollInterval is how often a fork waiting for its turn to end looks at
	// the source again without being woken by the source's status.
	PollInterval time.Duration
	// CopyTimeout bounds the steps of one reconcile, the reading of the
	// source and the copy included: a store that hangs mid-listing or
	// mid-copy gives the fork's copy slot back when it passes, and the
	// fork is retried with backoff. 0 is no bound but the reconcile's.
	CopyTimeout time.Duration
	// CopyPrefixes: children copy their source's prefix instead of
	// referring to it (--fork-prefix=copy).
	CopyPrefixes bool

	// queue is the controller's fair queue (fair_queue.go); copies bounds
	// the forks cut and copied at once, since each reads the source's log.
	queue  *fairQueue
	copies *slots
	// wakeups are the forks a freed copy slot is for (slots.wake).
	wakeups  wakeups
	watchdog *watchdog
	// announced remembers, by fork, the ending whose Event was raised: a
	// reconcile on a cache that has not seen the fork's new status yet
	// runs the steps again and must not announce the same ending twice.
	announced sync.Map
}

// forkScope is what the steps of one reconcile share.
type forkScope struct {
	fork   *turnlogv1.SessionFork
	before turnlogv1.SessionForkStatus

	anchor int64
	source *turnlogv1.Session
	child  *turnlogv1.Session
	point  forkcut.Point

	// outcome is the Succeeded condition the steps settled on.
	outcome condition
	status  metav1.ConditionStatus
	// transient is set for errors worth retrying; observedGeneration is
	// then left alone.
	transient bool
	result    ctrl.Result
	// copySlot is set while the fork holds one of the manager's copy
	// slots.
	copySlot bool
	// seeded is how the child's log was seeded, once it is, and
	// derivedFrom where its derived data starts, when this reconcile
	// seeded it.
	seeded      sessionlog.ForkResult
	derivedFrom *derived.Seeded
}

// errForkFailed marks a terminal failure, already in the fork's status.
var errForkFailed = errors.New("fork failed")

// Reconcile runs the fork's steps and writes its status once.
func (r *SessionForkReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.reconcile(ctx, req).Result()
}

func (r *SessionForkReconciler) reconcile(ctx context.Context, req ctrl.Request) outcome.Outcome {
	ctx, span := startReconcile(ctx, "SessionFork", req)
	defer span.End()
	fork := &turnlogv1.SessionFork{}
	if err := r.Get(ctx, req.NamespacedName, fork); err != nil {
		if apierrors.IsNotFound(err) {
			r.announced.Delete(req.NamespacedName)
		}
		return outcome.Retry(client.IgnoreNotFound(err))
	}
	if c := meta.FindStatusCondition(fork.Status.Conditions, turnlogv1.ConditionSucceeded); c != nil && c.Status != metav1.ConditionUnknown && c.ObservedGeneration == fork.Generation {
		return outcome.Wait(0) // a fork runs to completion once
	}
	r.queue.reportHeld(req, fork, r.Recorder)
	s := &forkScope{fork: fork, before: *fork.Status.DeepCopy(), status: metav1.ConditionUnknown,
		outcome: condition{turnlogv1.ReasonForking, "forking"}}
	stepsCtx, cancel := ctx, context.CancelFunc(func() {})
	if r.CopyTimeout > 0 {
		stepsCtx, cancel = context.WithTimeout(ctx, r.CopyTimeout)
	}
	err := r.runSteps(stepsCtx, s)
	cancel()
	if s.copySlot {
		r.copies.release(fork.Namespace)
	}
	if perr := r.patchStatus(ctx, s); perr != nil {
		if apierrors.IsConflict(perr) {
			// The steps ran on a fork the cache was behind on, which may
			// have ended already: the next reconcile reads it anew.
			return outcome.Wait(time.Second)
		}
		// Whatever the steps found, the fork's status must be written:
		// the next reconcile finds it again.
		return outcome.Retry(errors.Join(err, perr))
	}
	switch {
	case errors.Is(err, errForkFailed):
		return outcome.Fail(err)
	case err != nil:
		return outcome.Retry(err)
	}
	return outcome.Wait(s.result.RequeueAfter)
}

// runSteps runs the fork's steps until one fails, ends the fork or asks to
// wait; after the last, the fork has succeeded.
func (r *SessionForkReconciler) runSteps(ctx context.Context, s *forkScope) error {
	for _, step := range []func(context.Context, *forkScope) error{
		r.reconcileAnchor,
		r.reconcileSource,
		r.reconcileCut,
		r.reconcileChild,
		r.reconcileCopy,
	} {
		if err := traceStep(ctx, step, s); err != nil {
			return err
		}
		if s.status != metav1.ConditionUnknown || s.result.RequeueAfter > 0 {
			return nil
		}
	}
	s.status = metav1.ConditionTrue
	prefix, how := seedingWords(s.seeded)
	s.fork.Status.Prefix = prefix
	s.outcome = condition{turnlogv1.ReasonForked, fmt.Sprintf("child Session %s holds seq 0..%d of %s, %s", s.child.Name, s.point.CutSeq, s.source.Name, how)}
	if r.firstAnnouncement(s.fork, turnlogv1.ReasonForked) {
		r.Recorder.Eventf(s.fork, s.child, "Normal", turnlogv1.EventForked, "Fork",
			"created Session %s from %s seq 0..%d, %s%s (atSeq %s, anchor %d, turn %d ended %s)",
			s.child.Name, s.source.Name, s.point.CutSeq, how, derivedWords(s.derivedFrom), s.fork.Spec.AtSeq, s.point.AnchorSeq, s.point.CutTurn, s.point.CutReason)
	}
	return nil
}

// firstAnnouncement records that fork's ending for its generation is
// announced, and reports whether it had not been.
func (r *SessionForkReconciler) firstAnnouncement(fork *turnlogv1.SessionFork, ending string) bool {
	key := types.NamespacedName{Namespace: fork.Namespace, Name: fork.Name}
	return firstTime(&r.announced, key, fmt.Sprintf("%s/%d/%s", fork.UID, fork.Generation, ending))
}

// fail ends the fork for good.
func (r *SessionForkReconciler) fail(s *forkScope, reason, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	s.status, s.outcome = metav1.ConditionFalse, condition{reason, msg}
	if r.firstAnnouncement(s.fork, reason) {
		r.Recorder.Eventf(s.fork, nil, "Warning", turnlogv1.EventForkFailed, "Fork", "%s: %s", reason, derived.Truncate(msg, 900))
	}
	return fmt.Errorf("%w: %s", errForkFailed, msg)
}

// storeError records a store failure worth retrying, in the stable words
// of storeProblem.
func (s *forkScope) storeError(ctx context.Context, store, doing string, err error) error {
	s.transient = true
	p := storeProblem(ctx, store, doing, err)
	s.outcome = condition{turnlogv1.ReasonForking, p.message}
	return err
}

// transientError records an error worth retrying.
func (s *forkScope) transientError(err error) error {
	s.transient = true
	s.outcome = condition{turnlogv1.ReasonForking, derived.Truncate(err.Error(), 1024)}
	return err
}

func (r *SessionForkReconciler) reconcileAnchor(_ context.Context, s *forkScope) error {
	anchor, err := forkcut.ParseAtSeq(s.fork.Spec.AtSeq)
	if err != nil {
		return r.fail(s, turnlogv1.ReasonInvalidAtSeq, "%v", err)
	}
	s.anchor = anchor
	s.fork.Status.AnchorSeq = &anchor
	return nil
}

func (r *SessionForkReconciler) reconcileSource(ctx context.Context, s *forkScope) error {
	source := &turnlogv1.Session{}
	err := r.sessionReader().Get(ctx, client.ObjectKey{Namespace: s.fork.Namespace, Name: s.fork.Spec.Source.Name}, source)
	if apierrors.IsNotFound(err) {
		return r.fail(s, turnlogv1.ReasonSourceNotFound, "source Session %s does not exist in namespace %s", s.fork.Spec.Source.Name, s.fork.Namespace)
	}
	if err != nil {
		return s.transientError(err)
	}
	if !source.DeletionTimestamp.IsZero() {
		return r.fail(s, turnlogv1.ReasonSourceDeleting, "source Session %s is being deleted; fork it before deleting it, or fork one of its forks", source.Name)
	}
	s.source = source

	child := &turnlogv1.Session{}
	err = r.sessionReader().Get(ctx, client.ObjectKey{Namespace: s.fork.Namespace, Name: childName(s.fork)}, child)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return s.transientError(err)
	case !isChildOf(child, s.fork, source, s.anchor):
		return r.fail(s, turnlogv1.ReasonTargetExists, "Session %s already exists and was not created by this SessionFork; set spec.target.name to another name", child.Name)
	default:
		s.child = child
	}
	return nil
}

// reconcileCut finds the cut in the source's log, reading only the prefix
// it keeps. A child that exists already records the cut it was made with.
// A manager that copies every fork's prefix (--fork-prefix=copy) waits for
// a copy slot first: copying is the expensive part of such a fork. A fork
// by reference writes a few small objects whatever the history's length,
// and takes none (the rare fork that falls back to copying, past a
// deleted Session, copies without one).
func (r *SessionForkReconciler) reconcileCut(ctx context.Context, s *forkScope) error {
	if r.CopyPrefixes && !r.acquireCopySlot(s) {
		return nil
	}
	if s.child != nil {
		from := s.child.Spec.ForkedFrom
		s.point = forkcut.Point{AtSeq: s.fork.Spec.AtSeq, AnchorSeq: from.AnchorSeq, CutSeq: from.CutSeq}
		if p, err := r.findCut(ctx, s); err == nil && p.CutSeq == from.CutSeq {
			s.point = p
		}
		s.setCut()
		return nil
	}
	p, err := r.findCut(ctx, s)
	switch {
	case errors.Is(err, forkcut.ErrAnchorBeyondHead):
		return r.fail(s, turnlogv1.ReasonAnchorBeyondHead, "%v", err)
	case errors.Is(err, forkcut.ErrTurnNotEnded):
		s.outcome = condition{turnlogv1.ReasonTurnInProgress, err.Error()}
		s.result.RequeueAfter = r.PollInterval
		return nil
	case err != nil:
		return s.storeError(ctx, s.source.Spec.Storage.StoreName(), "reading the source's log", err)
	}
	s.point = p
	s.setCut()
	return nil
}

// acquireCopySlot takes a copy slot for the rest of the reconcile, or
// reports the fork queued (with one Event when it starts waiting) and
// looks again shortly.
func (r *SessionForkReconciler) acquireCopySlot(s *forkScope) bool {
	if r.copies == nil {
		return true
	}
	ok, limit := r.copies.tryAcquire(client.ObjectKeyFromObject(s.fork))
	if ok {
		s.copySlot = true
		return true
	}
	s.outcome = condition{turnlogv1.ReasonForkQueued, "waiting for a copy slot: " + limit}
	if c := meta.FindStatusCondition(s.before.Conditions, turnlogv1.ConditionSucceeded); c == nil || c.Reason != turnlogv1.ReasonForkQueued {
		r.Recorder.Eventf(s.fork, nil, "Normal", turnlogv1.EventForkQueued, "Fork", "%s", s.outcome.message)
	}
	s.transient = true
	s.result.RequeueAfter = jittered(slotRetry)
	return false
}

// findCut reads the source from the anchor on: the cut is the first
// turn/end at or after it, and nothing before it can move the cut. A host
// that flushes every turn leaves thousands of small segments in an
// hour-old log; reading them all for every fork made forks of long logs
// queue for their copy slot for hours. (What Find also reports about the
// prefix, its last compaction and system messages, is then incomplete; the
// controller uses neither.)
func (r *SessionForkReconciler) findCut(ctx context.Context, s *forkScope) (forkcut.Point, error) {
	log, err := r.sourceLog(ctx, s)
	if err != nil {
		return forkcut.Point{}, err
	}
	p, err := forkcut.Find(log.Events(ctx, s.anchor), s.fork.Spec.AtSeq)
	if cerr, ok := errors.AsType[*forkcut.CutError](err); ok && errors.Is(err, forkcut.ErrAnchorBeyondHead) {
		// Nothing was read past the anchor, so Find saw no head: the
		// message names the log's own.
		if cerr.Head, err = log.Head(ctx); err != nil {
			return forkcut.Point{}, err
		}
		return forkcut.Point{}, cerr
	}
	return p, err
}

func (s *forkScope) setCut() {
	st := &s.fork.Status
	cut, turn := s.point.CutSeq, s.point.CutTurn
	st.CutSeq = &cut
	if turn > 0 {
		st.CutTurn = &turn
		st.CutReason = string(s.point.CutReason)
	}
}

// reconcileChild creates the child Session. It is created before its log is
// seeded because the log's location includes the child's UID; until the
// copy is complete the Session controller reports the child as Seeding.
func (r *SessionForkReconciler) reconcileChild(ctx context.Context, s *forkScope) error {
	if s.child != nil {
		s.fork.Status.ChildName = s.child.Name
		return nil
	}
	labels := make(map[string]string, len(s.fork.Spec.Target.Labels)+2)
	for k, v := range s.fork.Spec.Target.Labels {
		labels[k] = string(v)
	}
	labels[turnlogv1.LabelForkSource] = s.source.Name
	labels[turnlogv1.LabelFork] = s.fork.Name
	adapter := s.source.Spec.Adapter
	if v := s.fork.Spec.Target.RefusedBlocks; v != "" {
		adapter.RefusedBlocks = v
	}
	child := &turnlogv1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: childName(s.fork), Namespace: s.fork.Namespace, Labels: labels,
			Annotations: map[string]string{turnlogv1.AnnotationTraceLineage: childLineage(s.source, s.point.CutSeq)}},
		Spec: turnlogv1.SessionSpec{
			Adapter: adapter,
			// A fork refers to segments inside one store; its log is its
			// own, whatever root the source's is in.
			Storage:   turnlogv1.SessionStorage{Store: s.source.Spec.Storage.Store},
			Retention: s.source.Spec.Retention,
			ForkedFrom: &turnlogv1.ForkOrigin{
				Session: s.source.Name, UID: s.source.LogUID(), Fork: s.fork.Name, ForkUID: string(s.fork.UID),
				AnchorSeq: s.point.AnchorSeq, CutSeq: s.point.CutSeq, SentKeptThrough: sentKeptThrough(s.source, s.point.CutSeq),
			},
		},
	}
	if err := r.Create(ctx, child); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Created by an earlier attempt or by someone else: the next
			// pass tells which.
			s.result.RequeueAfter = time.Second
			return nil
		}
		if apierrors.IsInvalid(err) {
			return r.fail(s, turnlogv1.ReasonInvalidTarget, "the API server refused child Session %s: %v", child.Name, err)
		}
		return s.transientError(fmt.Errorf("create child Session %s: %w", child.Name, err))
	}
	s.child = child
	s.fork.Status.ChildName = child.Name
	return nil
}

// sentKeptThrough is how far a fork's child holds responses its source's
// hosts requested with every block kept, when that is short of the cut:
// a source that leaves refused blocks out (a live pi does, for a Session
// that drops them) requested its own responses without them, so only what
// its own source kept counts. nil: through the cut.
func sentKeptThrough(source *turnlogv1.Session, cut int64) *int64 {
	if !sessionio.Target(source.Spec.Adapter).DropsRefused() {
		return nil
	}
	kept := int64(0)
	if from := source.Spec.ForkedFrom; from != nil {
		kept = from.KeptThrough()
	}
	return ptr.To(min(kept, cut))
}

// reconcileCopy seeds the child's own location with the source's events
// 0..cut, by reference where it can (sessionlog.Store.Fork), and nudges
// the child to pick them up.
func (r *SessionForkReconciler) reconcileCopy(ctx context.Context, s *forkScope) error {
	name := s.source.Spec.Storage.StoreName()
	st, err := r.Stores.Store(ctx, name)
	if err != nil {
		return s.storeError(ctx, name, "opening the store", err)
	}
	logs, src, dst := st.Logs, st.Location(s.source), st.Location(s.child)
	r.seedDerived(ctx, logs, src, dst, s)
	res, err := r.seedLog(ctx, logs, src, dst, s.point.CutSeq)
	if errors.Is(err, sessionlog.ErrDestinationNotEmpty) {
		// The fork may have completed before the fork's status was
		// written, and the child's log grown since.
		if seeded, herr := childSeeded(ctx, logs, dst, s.point.CutSeq); herr != nil {
			return s.storeError(ctx, name, "reading the child's log", herr)
		} else if !seeded {
			return r.fail(s, turnlogv1.ReasonTargetExists, "the log of Session %s holds events that are not the source's prefix: %v", s.child.Name, err)
		}
		refs, rerr := childReferences(ctx, logs, dst)
		if rerr != nil {
			return s.storeError(ctx, name, "reading the child's log", rerr)
		}
		res, err = sessionlog.ForkResult{Referenced: refs}, nil
	}
	if err != nil {
		return s.storeError(ctx, name, fmt.Sprintf("forking seq 0..%d of %s into %s", s.point.CutSeq, src, dst), err)
	}
	if res.CopiedBecause != "" && s.derivedFrom != nil && s.derivedFrom.SharedParts > 0 {
		// No pin keeps the parts the transcript was to share: the
		// child replays its prefix instead.
		if err := r.forgetSharedTranscript(ctx, logs, dst, s); err != nil {
			return s.storeError(ctx, name, "resetting the child's transcript", err)
		}
	}
	s.seeded = res
	if err := sessionio.Nudge(ctx, r.Client, client.ObjectKeyFromObject(s.child), nil); err != nil {
		return s.transientError(err)
	}
	return nil
}

// Values of --fork-prefix.
const (
	ForkPrefixReference = "reference"
	ForkPrefixCopy      = "copy"
)

// seedLog seeds the child's log with the source's events 0..cut, by
// reference unless the manager copies.
func (r *SessionForkReconciler) seedLog(ctx context.Context, logs *sessionlog.Store, src, dst sessionlog.Location, cut int64) (sessionlog.ForkResult, error) {
	if r.CopyPrefixes {
		err := logs.CopyPrefix(ctx, src, dst, cut)
		return sessionlog.ForkResult{CopiedBecause: "the manager copies every fork's prefix (--fork-prefix=copy)"}, err
	}
	return logs.Fork(ctx, src, dst, cut, sessionLiveness(r.sessionReader()))
}

// seedDerived starts the child's derived data from the source's
// checkpoints, before its log reaches the cut (until then the child's
// Session waits as Seeding and runs no worker): the child's first runs
// then fold only the events after them. A child that drops refused blocks
// replays the prefix with its source's request layout, not as the source
// did, and starts its transcript from the log. Seeding is a head start
// and nothing more, so a store that fails it costs the child that head
// start, not the fork.
func (r *SessionForkReconciler) seedDerived(ctx context.Context, logs *sessionlog.Store, src, dst sessionlog.Location, s *forkScope) {
	from, err := logs.Log(src)
	if err != nil {
		return
	}
	to, err := logs.Log(dst)
	if err != nil {
		return
	}
	// The child may share the transcript parts of the Sessions its pins
	// will keep; with --fork-prefix=copy it copies them too.
	var pinned sessionlog.References
	if !r.CopyPrefixes {
		if pinned, err = logs.ForkReferences(ctx, src, s.point.CutSeq); err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("the child's derived data starts from its log", "reason", err.Error())
			return
		}
	}
	target := sessionio.Target(s.child.Spec.Adapter)
	seeded, err := derived.SeedFork(ctx, derived.StoreLog{Log: from}, derived.StoreLog{Log: to}, s.point.CutSeq, target, !target.DropsRefused(), pinned.Names)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("the child's derived data starts from its log", "reason", err.Error())
	}
	s.derivedFrom = &seeded
}

// forgetSharedTranscript deletes the child's seeded transcript
// checkpoint, whose shared parts no pin keeps.
func (r *SessionForkReconciler) forgetSharedTranscript(ctx context.Context, logs *sessionlog.Store, dst sessionlog.Location, s *forkScope) error {
	to, err := logs.Log(dst)
	if err != nil {
		return err
	}
	if err := to.DeleteDerived(ctx, derived.ReplayCheckpointName(sessionio.Target(s.child.Spec.Adapter))); err != nil {
		return err
	}
	s.derivedFrom.Transcript, s.derivedFrom.SharedParts = -1, 0
	return nil
}

// childReferences is how many of the child's first seqs it refers to.
func childReferences(ctx context.Context, logs *sessionlog.Store, child sessionlog.Location) (int64, error) {
	log, err := logs.Log(child)
	if err != nil {
		return 0, err
	}
	refs, err := log.References(ctx)
	if err != nil || len(refs.Refs) == 0 {
		return 0, err
	}
	return refs.Refs[len(refs.Refs)-1].Through + 1, nil
}

// seedingWords say how the fork seeded the child, for its status and
// Event.
func seedingWords(res sessionlog.ForkResult) (prefix, how string) {
	switch {
	case res.CopiedBecause != "":
		return turnlogv1.PrefixCopied, "copied because " + res.CopiedBecause
	case res.Referenced == 0:
		return turnlogv1.PrefixReferenced, "the one segment holding them written again, cut"
	}
	return turnlogv1.PrefixReferenced, fmt.Sprintf("referring to the source's seq 0..%d", res.Referenced-1)
}

// derivedWords say where the child's derived data starts, when this
// reconcile seeded it: what its first runs still fold, and what of the
// source's transcript it shares.
func derivedWords(d *derived.Seeded) string {
	if d == nil || d.Assembly < 0 && d.Transcript < 0 {
		return ""
	}
	words := "; its derived data starts from the source's"
	if d.Assembly >= 0 {
		words += fmt.Sprintf(", assembly at seq %d", d.Assembly)
	}
	if d.Transcript >= 0 {
		words += fmt.Sprintf(", transcript at seq %d (%d parts shared, %d copied)", d.Transcript, d.SharedParts, d.CopiedParts)
	}
	return words
}

// childSeeded reports whether the child's log already reaches the cut.
func childSeeded(ctx context.Context, logs *sessionlog.Store, child sessionlog.Location, cut int64) (bool, error) {
	log, err := logs.Log(child)
	if err != nil {
		return false, err
	}
	head, err := log.Head(ctx)
	if err != nil {
		return false, err
	}
	return head.Head() >= cut, nil
}

func (r *SessionForkReconciler) sourceLog(ctx context.Context, s *forkScope) (derived.StoreLog, error) {
	st, err := r.Stores.Store(ctx, s.source.Spec.Storage.StoreName())
	if err != nil {
		return derived.StoreLog{}, err
	}
	log, err := st.Logs.Log(st.Location(s.source))
	if err != nil {
		return derived.StoreLog{}, err
	}
	return derived.StoreLog{Log: log}, nil
}

func (r *SessionForkReconciler) patchStatus(ctx context.Context, s *forkScope) error {
	base := s.fork.DeepCopy()
	base.Status = s.before
	gen := s.fork.Generation
	if !s.transient {
		s.fork.Status.ObservedGeneration = gen
	}
	meta.SetStatusCondition(&s.fork.Status.Conditions, metav1.Condition{
		Type: turnlogv1.ConditionSucceeded, Status: s.status, Reason: s.outcome.reason,
		Message: derived.Truncate(s.outcome.message, 1024), ObservedGeneration: gen,
	})
	// With the version the steps read: a reconcile that ran on a stale
	// cache (after a watch broke) must not turn a fork that succeeded
	// meanwhile back to Forking, which would make it run, and announce
	// itself, again.
	if err := r.Status().Patch(ctx, s.fork, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch status: %w", err)
	}
	return nil
}

// childName is the child Session's name: spec.target.name, else the fork's.
func childName(fork *turnlogv1.SessionFork) string {
	if fork.Spec.Target.Name != "" {
		return fork.Spec.Target.Name
	}
	return fork.Name
}

// isChildOf tells this fork's child from a Session that merely has its name.
func isChildOf(child *turnlogv1.Session, fork *turnlogv1.SessionFork, source *turnlogv1.Session, anchor int64) bool {
	from := child.Spec.ForkedFrom
	return from != nil && from.Fork == fork.Name && from.ForkUID == string(fork.UID) &&
		from.Session == source.Name && from.UID == source.LogUID() && from.AnchorSeq == anchor
}

// sourceNameField indexes SessionForks by their source Session.
const sourceNameField = "spec.source.name"

// Permissions on SessionForks.
// +kubebuilder:rbac:groups=turnlog.dev,resources=sessionforks,verbs=get;list;watch
// +kubebuilder:rbac:groups=turnlog.dev,resources=sessionforks/status,verbs=get;patch

// SetupWithManager registers the reconciler. A fork waiting for its turn to
// end is woken when its source Session's status changes.
func (r *SessionForkReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &turnlogv1.SessionFork{}, sourceNameField, func(o client.Object) []string {
		return []string{o.(*turnlogv1.SessionFork).Spec.Source.Name}
	}); err != nil {
		return err
	}
	if r.queue == nil {
		r.queue = &fairQueue{}
	}
	var rec reconcile.Reconciler = r
	if r.watchdog != nil {
		rec = r.watchdog.watch("sessionfork", r, func() client.Object { return &turnlogv1.SessionFork{} })
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&turnlogv1.SessionFork{}).
		Watches(&turnlogv1.Session{}, handler.EnqueueRequestsFromMapFunc(r.forksOfSource))
	if r.wakeups != nil {
		b = b.WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{}))
	}
	return b.Named("sessionfork").
		WithOptions(r.queue.options(r.PollInterval)).
		Complete(rec)
}

func (r *SessionForkReconciler) forksOfSource(ctx context.Context, o client.Object) []reconcile.Request {
	forks := &turnlogv1.SessionForkList{}
	if err := r.List(ctx, forks, client.InNamespace(o.GetNamespace()), client.MatchingFields{sourceNameField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the forks of a Session", "session", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(forks.Items))
	for _, f := range forks.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&f)})
	}
	return reqs
}
