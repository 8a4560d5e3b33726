package controllers

import (
	"strings"
	"testing"
)

// TestSlots: a namespace at its share waits while others go on, the
// manager's total caps every namespace, and a released slot is free
// again; the refusal names the flag an operator would change.
func TestSlots(t *testing.T) {
	s := &slots{total: 3, totalName: "fork-copies", perNamespace: 2, perNamespaceName: "namespace-fork-copies"}
	for _, ns := range []string{"a", "a"} {
		if ok, limit := s.tryAcquire(ns); !ok {
			t.Fatalf("slot for %s refused: %s", ns, limit)
		}
	}
	if ok, limit := s.tryAcquire("a"); ok || limit != "namespace a has 2 going (--namespace-fork-copies=2)" {
		t.Fatalf("third slot for a: %v %q", ok, limit)
	}
	if ok, _ := s.tryAcquire("b"); !ok {
		t.Fatal("b refused while a was at its share")
	}
	if ok, limit := s.tryAcquire("c"); ok || !strings.Contains(limit, "--fork-copies=3") {
		t.Fatalf("slot over the total: %v %q", ok, limit)
	}
	s.release("a")
	if ok, _ := s.tryAcquire("c"); !ok {
		t.Fatal("c refused after a released a slot")
	}
	if len(s.byName) != 3 {
		t.Fatalf("namespaces held: %v", s.byName)
	}
	for _, ns := range []string{"a", "b", "c"} {
		s.release(ns)
	}
	if s.inUse != 0 || len(s.byName) != 0 {
		t.Fatalf("after releasing everything: %d in use, %v", s.inUse, s.byName)
	}
}

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
