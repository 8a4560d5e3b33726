package controllers

import (
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/worker"
)

// How a Session nobody nudges is looked at. Appends that come with a nudge
// (the turnlog.dev/requested-at annotation) wake the controller at once;
// the others are found by polling, and most Sessions are idle most of the
// time, so polling is what a large installation pays for:
//
//   - A Session that is current with its log (Ready, nothing to do, status
//     for its generation) is looked at with one request: does the segment
//     its next append would create exist? Every append creates exactly that
//     key (sessionlog.Log.Grown), so the probe can neither lie nor lag, and
//     it costs the same for a log of one segment or a million.
//   - Only if it exists (or the Session is not settled) does the reconcile
//     read the log's head and the checkpoints.
//   - The probe comes again after as long as the log has been quiet — the
//     time since status.lastAppendTime or the last nudge, whichever is
//     later — but at least PollInterval and at most MaxPollInterval. An
//     append made without a nudge is therefore noticed within
//     clamp(how long the log had been quiet, PollInterval, MaxPollInterval).
//
// The state is in the Session itself (status and annotation), so a
// restarted manager polls as the previous one did, and nothing is kept per
// Session in the manager besides the work queue's own entry.
//
// A nudge with a time newer than status.lastAppendTime also makes the next
// reconcile a full one, so that a nudge still means "look at everything
// again" (a forged or repaired checkpoint, say); answering it costs one
// status write.

// reconcileIdle ends the reconcile of a settled Session whose log has not
// grown, after one store request and without writing anything. It reports
// false when the full reconcile must run: the Session is not settled, the
// log grew, or the probe failed (the full reconcile reports why).
func (r *SessionReconciler) reconcileIdle(ctx context.Context, session *turnlogv1.Session) (time.Duration, bool) {
	name := session.Spec.Storage.StoreName()
	st, err := r.Stores.Store(ctx, name)
	if err != nil {
		return 0, false
	}
	loc := st.Location(session)
	if session.Status.Location != statusLocation(name, loc) {
		return 0, false
	}
	var given worker.Invocation
	if w := session.Status.Worker; w != nil {
		given = workerInvocation(session, derived.Task(w.Task), st.URL, loc)
	}
	if !settled(session, given) {
		return 0, false
	}
	log, err := st.Logs.Log(loc)
	if err != nil {
		return 0, false
	}
	next := int64(0)
	if h := session.Status.HeadSeq; h != nil {
		next = *h + 1
	}
	if grown, err := log.Grown(ctx, next); err != nil || grown {
		return 0, false
	}
	return r.idlePoll(session, r.now()), true
}

// settled: the status says the Session's derived data is current with a
// log whose head is status.headSeq, for the Session's generation, or that
// a worker run failed --worker-max-failures times and waits for an append,
// a nudge, a spec change or another command line (given: what this
// manager tells the run in status.worker). Derived data changes only
// through the controller's own worker runs, so for such a Session only an
// append (or a nudge, a new generation or a new command line, all seen
// here) can make work.
func settled(s *turnlogv1.Session, given worker.Invocation) bool {
	st := &s.Status
	if st.ObservedGeneration != s.Generation || st.LastAppendTime == nil {
		return false
	}
	if t, ok := nudgeTime(s); ok && t.After(st.LastAppendTime.Time) {
		// A nudge the controller has not answered yet: it asks for a full
		// look (the checkpoints too), not only for appends.
		return false
	}
	c := meta.FindStatusCondition(st.Conditions, turnlogv1.ConditionReady)
	if c == nil || c.ObservedGeneration != s.Generation || !readyReasons[c.Reason].settled || c.Status != readyStatus(c.Reason) {
		return false
	}
	if c.Reason == turnlogv1.ReasonWorkerFailedPermanently {
		// Given up on until the log grows (its next run has another name),
		// the Session is nudged (any new value: the trigger changes), its
		// spec changes, or this manager runs the worker with another
		// command line: polling it costs what an idle one does.
		return st.Worker != nil && st.Worker.RetryAt == nil && st.Worker.Trigger == trigger(s, given)
	}
	return st.Worker == nil
}

// nextPoll is when a reconcile that ended without an error with ready
// (nil: current) looks at the Session again unless something wakes it: a
// settled Session backs off, any other is looked at every PollInterval.
// (A reconcile that failed is retried with the controller's backoff.)
func (r *SessionReconciler) nextPoll(s *sessionScope) time.Duration {
	if readyReasons[s.readyReason()].settled {
		return r.idlePoll(s.session, r.now())
	}
	return r.PollInterval
}

// idlePoll is how long a settled Session waits for its next probe: as long
// as its log has been quiet, within [PollInterval, MaxPollInterval], less
// up to a tenth so that Sessions that went quiet together spread out.
func (r *SessionReconciler) idlePoll(s *turnlogv1.Session, now time.Time) time.Duration {
	last := now
	if t := s.Status.LastAppendTime; t != nil {
		last = t.Time
	}
	if t, ok := nudgeTime(s); ok && t.After(last) {
		last = t
	}
	d := min(max(now.Sub(last), r.PollInterval), max(r.MaxPollInterval, r.PollInterval))
	return d - rand.N(d/10+1)
}

// noteAppend sets status.lastAppendTime when the head moved, when a nudge
// came since, and on a Session that has none yet. It is never earlier than
// the nudge, so that settled sees the nudge answered even if the nudger's
// clock is ahead.
func noteAppend(s *turnlogv1.Session, before *turnlogv1.SessionStatus, now time.Time) {
	st := &s.Status
	moved := (st.HeadSeq == nil) != (before.HeadSeq == nil) || (st.HeadSeq != nil && *st.HeadSeq != *before.HeadSeq)
	nudge, nudged := nudgeTime(s)
	if !moved && st.LastAppendTime != nil && !(nudged && nudge.After(st.LastAppendTime.Time)) {
		return
	}
	if nudged && nudge.After(now) {
		now = nudge
	}
	st.LastAppendTime = &metav1.MicroTime{Time: now.Truncate(time.Microsecond)}
}

// nudgeTime is the time in the Session's nudge annotation, to the
// microsecond status keeps. turnlog's CLI, host package and fork controller
// write RFC 3339 times; another value is a nudge all the same, but only for
// appends (its watch event wakes the controller, which probes the log).
func nudgeTime(s *turnlogv1.Session) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s.Annotations[turnlogv1.AnnotationRequestedAt])
	return t.Truncate(time.Microsecond), err == nil
}
