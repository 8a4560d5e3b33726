package controllers

import "fmt"

// Limits keep one namespace from holding the manager for the others
// (docs/controllers.md, "Sharing the manager between namespaces"). Every
// namespace gets a share of each controller's reconciles, of the worker
// runs and of the fork copies, and the manager's memory is bounded by the
// number of copies and local runs it does at once, not by the number of
// Sessions and forks a tenant creates.
type Limits struct {
	// ConcurrentReconciles is how many reconciles each controller runs at
	// once.
	ConcurrentReconciles int
	// NamespaceConcurrentReconciles is how many of them one namespace's
	// objects may hold; below ConcurrentReconciles, the other namespaces
	// always have a reconcile free.
	NamespaceConcurrentReconciles int
	// NamespaceReconcileRate is how many reconciles a second one
	// namespace's objects get from each controller, in bursts of
	// NamespaceReconcileBurst; 0 is no limit. Over it, nudges and polls
	// wait, coalesced, in the namespace's queue.
	NamespaceReconcileRate  float64
	NamespaceReconcileBurst int
	// NamespaceWorkerRuns is how many worker runs (on worker pods, or
	// inside the manager) one namespace may have going at once.
	NamespaceWorkerRuns int
	// LocalWorkerRuns is how many worker runs the manager runs inside its
	// own process at once (local worker mode).
	LocalWorkerRuns int
	// ForkCopies is how many forks the manager cuts and copies at once;
	// NamespaceForkCopies how many of them may be one namespace's.
	ForkCopies, NamespaceForkCopies int
}

// Defaults of Limits.
const (
	DefaultConcurrentReconciles          = 4
	DefaultNamespaceConcurrentReconciles = 2
	DefaultNamespaceWorkerRuns           = 4
	DefaultLocalWorkerRuns               = 1
	DefaultForkCopies                    = 2
	DefaultNamespaceForkCopies           = 1
)

// withDefaults fills in zero fields that have a default, and checks the
// others.
func (l Limits) withDefaults() (Limits, error) {
	for name, v := range map[string]int{
		"concurrent reconciles": l.ConcurrentReconciles, "namespace concurrent reconciles": l.NamespaceConcurrentReconciles,
		"namespace reconcile burst": l.NamespaceReconcileBurst, "namespace worker runs": l.NamespaceWorkerRuns,
		"local worker runs": l.LocalWorkerRuns, "fork copies": l.ForkCopies, "namespace fork copies": l.NamespaceForkCopies,
	} {
		if v < 0 {
			return l, fmt.Errorf("%s must not be negative, got %d", name, v)
		}
	}
	if l.NamespaceReconcileRate < 0 {
		return l, fmt.Errorf("namespace reconcile rate must not be negative, got %g", l.NamespaceReconcileRate)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.ConcurrentReconciles, DefaultConcurrentReconciles)
	def(&l.NamespaceConcurrentReconciles, DefaultNamespaceConcurrentReconciles)
	def(&l.NamespaceWorkerRuns, DefaultNamespaceWorkerRuns)
	def(&l.NamespaceForkCopies, DefaultNamespaceForkCopies)
	def(&l.LocalWorkerRuns, DefaultLocalWorkerRuns)
	def(&l.ForkCopies, DefaultForkCopies)
	if l.NamespaceReconcileBurst == 0 {
		l.NamespaceReconcileBurst = max(1, int(2*l.NamespaceReconcileRate))
	}
	return l, nil
}
