package controllers

import (
	"strings"
	"testing"
)

func TestLimitsDefaults(t *testing.T) {
	l, err := Limits{NamespaceReconcileRate: 5}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if l.ConcurrentReconciles != DefaultConcurrentReconciles || l.LocalWorkerRuns != DefaultLocalWorkerRuns ||
		l.ForkCopies != DefaultForkCopies || l.NamespaceReconcileBurst != 10 {
		t.Fatalf("defaults: %+v", l)
	}
	if l.NamespaceConcurrentReconciles != DefaultNamespaceConcurrentReconciles || l.NamespaceWorkerRuns != DefaultNamespaceWorkerRuns ||
		l.NamespaceForkCopies != DefaultNamespaceForkCopies {
		t.Fatalf("per-namespace defaults: %+v", l)
	}
	if _, err := (Limits{ForkCopies: -1}).withDefaults(); err == nil || !strings.Contains(err.Error(), "fork copies must not be negative") {
		t.Fatalf("negative fork copies: %v", err)
	}
}
