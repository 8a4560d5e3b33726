package controllers

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// obj is an object of namespace ns that asks for a slot.
func obj(ns string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: "run-of-" + ns}
}

// TestSlots: a namespace at its share waits while others go on, the
// manager's total caps every namespace, and a released slot is free
// again; the refusal names the flag an operator would change.
func TestSlots(t *testing.T) {
	s := &slots{total: 3, totalName: "fork-copies", perNamespace: 2, perNamespaceName: "namespace-fork-copies"}
	for _, ns := range []string{"a", "a"} {
		if ok, limit := s.tryAcquire(obj(ns)); !ok {
			t.Fatalf("slot for %s refused: %s", ns, limit)
		}
	}
	if ok, limit := s.tryAcquire(obj("a")); ok || limit != "namespace a has 2 going (--namespace-fork-copies=2)" {
		t.Fatalf("third slot for a: %v %q", ok, limit)
	}
	if ok, _ := s.tryAcquire(obj("b")); !ok {
		t.Fatal("b refused while a was at its share")
	}
	if ok, limit := s.tryAcquire(obj("c")); ok || !strings.Contains(limit, "--fork-copies=3") {
		t.Fatalf("slot over the total: %v %q", ok, limit)
	}
	s.release("a")
	if ok, _ := s.tryAcquire(obj("c")); !ok {
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

// TestSlotsRoundRobin: a slot that frees goes to the namespace that has
// waited longest, not to whichever asks first, so a namespace with many
// runs waiting cannot hold the slots ahead of one with a single run; a
// namespace that stops asking loses its turn.
func TestSlotsRoundRobin(t *testing.T) {
	now := time.Unix(0, 0)
	s := &slots{total: 1, totalName: "local-worker-runs", now: func() time.Time { return now }}
	try := func(ns string) (bool, string) {
		t.Helper()
		now = now.Add(100 * time.Millisecond)
		return s.tryAcquire(obj(ns))
	}
	if ok, _ := try("flood"); !ok {
		t.Fatal("the first run was refused")
	}
	if ok, _ := try("quiet"); ok {
		t.Fatal("a second run got a slot over --local-worker-runs=1")
	}
	if ok, _ := try("flood"); ok {
		t.Fatal("a second run of flood got a slot over --local-worker-runs=1")
	}
	s.release("flood")
	// flood's other runs ask first, over and over: it is quiet's turn.
	for range 3 {
		if ok, why := try("flood"); ok || why != "the next free slot is namespace quiet's turn (--local-worker-runs=1, shared round robin between the namespaces waiting)" {
			t.Fatalf("flood took the slot quiet waited for: %v %q", ok, why)
		}
	}
	if ok, why := try("quiet"); !ok {
		t.Fatalf("quiet refused on its turn: %s", why)
	}
	s.release("quiet")
	// Then flood's, which waited meanwhile.
	if ok, _ := try("other"); ok {
		t.Fatal("a newcomer took the slot ahead of flood, which waited")
	}
	if ok, _ := try("flood"); !ok {
		t.Fatal("flood refused on its turn")
	}
	s.release("flood")
	// A turn not taken within turnGrace lapses: other waited, stopped
	// asking, and flood gets the slot.
	now = now.Add(turnGrace + time.Second)
	if ok, why := try("flood"); !ok {
		t.Fatalf("a lapsed turn held the slot: %s", why)
	}
}

// TestSlotsWakeTheTurn: a slot that frees wakes the object whose
// namespace's turn it is, so the turn does not hold the slot idle until
// that object looks again; a namespace's own share freeing wakes its own.
func TestSlotsWakeTheTurn(t *testing.T) {
	var woken []types.NamespacedName
	s := &slots{total: 1, totalName: "local-worker-runs", perNamespace: 1, perNamespaceName: "namespace-worker-runs",
		wake: func(k types.NamespacedName) { woken = append(woken, k) }}
	flood := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: "flood", Name: "child-" + string(rune('a'+i))}
	}
	if ok, _ := s.tryAcquire(flood(0)); !ok {
		t.Fatal("the first run was refused")
	}
	for i := 1; i < 4; i++ {
		if ok, _ := s.tryAcquire(flood(i)); ok {
			t.Fatal("a run over the limits got a slot")
		}
	}
	if ok, _ := s.tryAcquire(obj("quiet")); ok {
		t.Fatal("quiet got a slot over --local-worker-runs=1")
	}
	s.release("flood")
	if len(woken) != 1 || woken[0] != obj("quiet") {
		t.Fatalf("woken %v; want quiet's run, whose turn it is", woken)
	}
	if ok, why := s.tryAcquire(obj("quiet")); !ok {
		t.Fatalf("quiet refused when woken: %s", why)
	}
	s.release("quiet")
	// No other namespace waits: flood's first waiter is woken.
	if len(woken) != 2 || woken[1] != flood(1) {
		t.Fatalf("woken %v; want flood's first waiting run", woken)
	}
	if ok, _ := s.tryAcquire(flood(1)); !ok {
		t.Fatal("flood's woken run was refused")
	}
	if len(s.waiters["flood"]) != 2 || s.waiters["quiet"] != nil {
		t.Fatalf("waiters %v: want flood's two others", s.waiters)
	}
}
