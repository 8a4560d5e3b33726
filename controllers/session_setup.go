package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

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
// do not wake it. A manager of one shard also notes the Sessions that come
// into its cache and lets go of those that leave it (shards.go).
func (r *SessionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	predicates := []predicate.Predicate{predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{})}
	if r.handover != nil {
		predicates = append(predicates, r.shardMoves())
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&turnlogv1.Session{}, builder.WithPredicates(predicates...)).
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
