package controllers

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// reconcileDelete applies spec.retention and releases the Session. Only the
// Session's own location — which includes its UID — is deleted, so neither
// another Session nor a later one of the same name loses an object.
func (r *SessionReconciler) reconcileDelete(ctx context.Context, session *turnlogv1.Session) error {
	if !controllerutil.ContainsFinalizer(session, turnlogv1.FinalizerRetention) {
		return nil
	}
	if err := r.Workers.Forget(ctx, session); err != nil {
		return fmt.Errorf("delete worker runs: %w", err)
	}
	if session.Spec.Retention != turnlogv1.RetentionRetain {
		url, loc := "", sessionLocation(session)
		if st := session.Spec.Storage; st != nil {
			url = st.URL
		}
		logs, err := r.Stores.Logs(ctx, url)
		if err != nil {
			return fmt.Errorf("delete the log at %s: %w", loc, err)
		}
		if _, err := logs.Delete(ctx, loc); err != nil {
			return fmt.Errorf("delete the log at %s: %w", loc, err)
		}
	}
	controllerutil.RemoveFinalizer(session, turnlogv1.FinalizerRetention)
	if err := r.Update(ctx, session); err != nil {
		// On a conflict the newer version's event retries the deletion,
		// which is idempotent.
		return client.IgnoreNotFound(ignoreConflict(err))
	}
	prefix := string(session.UID) + "/"
	r.reported.Range(func(key, _ any) bool {
		if strings.HasPrefix(key.(string), prefix) {
			r.reported.Delete(key)
		}
		return true
	})
	return nil
}

// ignoreConflict drops optimistic-concurrency conflicts, which resolve
// themselves through the watch event of the newer version.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}
