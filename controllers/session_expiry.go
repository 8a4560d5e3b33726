package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// +kubebuilder:rbac:groups=turnlog.dev,resources=sessions,verbs=delete

// Retention by age (spec.deleteAfterIdle): a Session whose log has had no
// append for that long is deleted, as `kubectl delete` would delete it, so
// that its finalizer applies spec.retention to its log and a source its
// forks refer to keeps what they need (Deletion and retention).

// sessionsExpired counts the Sessions spec.deleteAfterIdle deleted;
// turnlog_sessions_due (session_metrics.go) those it is about to.
var sessionsExpired = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "turnlog_sessions_expired_total",
	Help: "Sessions the manager deleted because their log had no append for spec.deleteAfterIdle.",
}, []string{"namespace"})

func init() { metrics.Registry.MustRegister(sessionsExpired) }

// expiresAt is when spec.deleteAfterIdle deletes session: its last append
// (status.lastAppendTime; before the first, its creation) plus the
// duration; false without spec.deleteAfterIdle.
func expiresAt(session *turnlogv1.Session) (time.Time, bool) {
	d := session.Spec.DeleteAfterIdle
	if d == nil {
		return time.Time{}, false
	}
	since := session.CreationTimestamp.Time
	if t := session.Status.LastAppendTime; t != nil && t.After(since) {
		since = t.Time
	}
	return since.Add(d.Duration), true
}

// now is the reconciler's clock: the real one unless a test gives another.
func (r *SessionReconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

// expire deletes session when spec.deleteAfterIdle has passed with no
// append, with an Expired Event that says why and what becomes of its log,
// and reports whether it did. Otherwise it returns how long until then (0
// without spec.deleteAfterIdle), for the next look to come no later.
func (r *SessionReconciler) expire(ctx context.Context, session *turnlogv1.Session) (deleted bool, wait time.Duration, err error) {
	at, ok := expiresAt(session)
	if !ok {
		return false, 0, nil
	}
	if left := at.Sub(r.now()); left > 0 {
		return false, left, nil
	}
	// An append the controller has not seen yet (a host that did not
	// nudge) is an append all the same: the normal path takes it in.
	if grown, err := r.grownUnseen(ctx, session); err != nil || grown {
		return false, 0, nil
	}
	since := at.Add(-session.Spec.DeleteAfterIdle.Duration)
	log := "deleted with it"
	if session.Spec.Retention == turnlogv1.RetentionRetain {
		log = "kept in the store (retention Retain)"
	}
	r.Recorder.Eventf(session, nil, "Normal", turnlogv1.EventExpired, "Delete",
		"no append since %s, spec.deleteAfterIdle %s: the Session is deleted and its log %s", since.UTC().Format(time.RFC3339), session.Spec.DeleteAfterIdle.Duration, log)
	uid := session.UID
	if err := r.Delete(ctx, session, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return false, 0, err
	}
	sessionsExpired.WithLabelValues(session.Namespace).Inc()
	return true, 0, nil
}

// grownUnseen reports whether session's log has events past
// status.headSeq. A store that cannot say is an error: nothing is deleted
// on a guess.
func (r *SessionReconciler) grownUnseen(ctx context.Context, session *turnlogv1.Session) (bool, error) {
	st, err := r.Stores.Store(ctx, session.Spec.Storage.StoreName())
	if err != nil {
		return false, err
	}
	log, err := st.Logs.Log(st.Location(session))
	if err != nil {
		return false, err
	}
	next := int64(0)
	if h := session.Status.HeadSeq; h != nil {
		next = *h + 1
	}
	return log.Grown(ctx, next)
}

// noteExpiry puts when the Session expires in its status.
func noteExpiry(session *turnlogv1.Session) {
	at, ok := expiresAt(session)
	if !ok {
		session.Status.ExpiresAt = nil
		return
	}
	session.Status.ExpiresAt = &metav1.Time{Time: at.Truncate(time.Second)}
}

// soonest is the shorter of two waits, 0 meaning none.
func soonest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
