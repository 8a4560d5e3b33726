package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/derived"
	"github.com/turnlog/turnlog/internal/outcome"
	"github.com/turnlog/turnlog/internal/sessionlog"
)

// reconcileDelete applies spec.retention and releases the Session. Only the
// Session's own location — which includes its UID — is deleted, so neither
// another Session nor a later one of the same name loses an object.
//
// A store that cannot be reached (or is no longer configured) must not hold
// the Session, and with it its namespace, forever: after DeletionTimeout
// the Session is released, the log left in place, and a LogOrphaned
// Warning Event says where it is.
func (r *SessionReconciler) reconcileDelete(ctx context.Context, session *turnlogv1.Session) outcome.Outcome {
	if !controllerutil.ContainsFinalizer(session, turnlogv1.FinalizerRetention) {
		return outcome.Wait(0)
	}
	if err := r.Workers.Forget(ctx, session); err != nil {
		return outcome.Retry(fmt.Errorf("delete worker runs: %w", err))
	}
	if session.Spec.Retention != turnlogv1.RetentionRetain {
		if again := r.deleteLog(ctx, session); again > 0 {
			return outcome.Wait(again)
		}
	}
	controllerutil.RemoveFinalizer(session, turnlogv1.FinalizerRetention)
	if err := r.Update(ctx, session); err != nil {
		// On a conflict the newer version's event retries the deletion,
		// which is idempotent.
		return outcome.Retry(client.IgnoreNotFound(ignoreConflict(err)))
	}
	r.forget(session.UID)
	return outcome.Wait(0)
}

// forget drops what the reconciler remembers of the Session uid.
func (r *SessionReconciler) forget(uid types.UID) {
	r.written.Delete(uid)
	prefix := string(uid) + "/"
	r.reported.Range(func(key, _ any) bool {
		if strings.HasPrefix(key.(string), prefix) {
			r.reported.Delete(key)
		}
		return true
	})
}

// deleteLog deletes the Session's log. While the store fails it says so in
// the Ready condition and returns when to try again; once DeletionTimeout
// has passed since the deletion began it gives up (zero).
func (r *SessionReconciler) deleteLog(ctx context.Context, session *turnlogv1.Session) time.Duration {
	name := session.Spec.Storage.StoreName()
	where := name + ":" + session.Namespace + "/" + session.Name + "/" + string(session.UID)
	deadline := session.DeletionTimestamp.Add(r.DeletionTimeout)
	// A store that hangs must not stretch the bound either.
	tctx, cancel := context.WithTimeout(ctx, max(time.Until(deadline), 5*time.Second))
	defer cancel()
	// location is where the log is, once the store could say ("" before).
	location := ""
	st, err := r.Stores.Store(tctx, name)
	if err == nil {
		loc := st.Location(session)
		location = statusLocation(name, loc)
		where = location
		if _, err = st.Logs.Delete(tctx, loc, sessionLiveness(r.apiReader())); err == nil {
			return 0
		}
	}
	problem := storeProblem(ctx, name, "deleting the log at "+where, err)
	if wait := time.Until(deadline); wait > 0 {
		r.setDeletionBlocked(ctx, session, fmt.Sprintf("%s; retried until %s, then the Session is released and the log left in place",
			problem.message, deadline.UTC().Format(time.RFC3339)))
		return min(wait, retryBackoff(3))
	}
	after := "its objects are left in the store"
	if r.orphans != nil {
		// Recorded before the Session is released, so that no log is
		// left unrecorded; the API server that would release it is the
		// one that keeps the record.
		if err := r.orphans.record(ctx, session, name, location, problem.message); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "recording an orphaned log")
			return retryBackoff(3)
		}
		after = fmt.Sprintf("its objects are left in the store, recorded in ConfigMap %s, and deleted by the orphan sweep once the store answers", r.orphans.where(session))
	}
	if r.firstReport(session, "orphaned", "") {
		r.Recorder.Eventf(session, nil, "Warning", turnlogv1.EventLogOrphaned, "Delete",
			"gave up deleting the log at %s after %s (%s); the Session is released and %s",
			where, r.DeletionTimeout, derived.Truncate(problem.message, 500), after)
	}
	return 0
}

// setDeletionBlocked says in the Ready condition why the Session is still
// there; failing to say so must not stop the retry.
func (r *SessionReconciler) setDeletionBlocked(ctx context.Context, session *turnlogv1.Session, msg string) {
	base := session.DeepCopy()
	blocked := condition{turnlogv1.ReasonDeletionBlocked, msg}
	setCondition(session, turnlogv1.ConditionReady, readyStatus(blocked.reason), blocked)
	if equality.Semantic.DeepEqual(base.Status, session.Status) {
		return
	}
	if err := r.Status().Patch(ctx, session, client.MergeFrom(base)); client.IgnoreNotFound(err) != nil {
		ctrl.LoggerFrom(ctx).Error(err, "patching the status of a Session being deleted")
	}
}

// sessionLiveness tells the store whether the Session whose log is at a
// location exists and is not being deleted, read from reader: deleting a
// log frees what its sources kept for it, and never from the root of a
// Session that is alive, whatever a host wrote there.
func sessionLiveness(reader client.Reader) sessionlog.Liveness {
	return func(ctx context.Context, loc sessionlog.Location) (bool, error) {
		s := &turnlogv1.Session{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: loc.Namespace, Name: loc.Session}, s)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return s.LogUID() == loc.UID && s.DeletionTimestamp.IsZero(), nil
	}
}

// ignoreConflict drops optimistic-concurrency conflicts, which resolve
// themselves through the watch event of the newer version.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// apiReader reads from the API server where the reconciler has one, so
// that a Session of another shard, which the cache does not hold, is seen.
func (r *SessionReconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}
