package controllers

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestStoreWaiters: of the Sessions waiting for a store, one probes at the
// breaker's interval and the others wait for the fallback; a prober that
// stopped looking is replaced; the breaker closing wakes every waiter of
// that store once, and no other store's.
func TestStoreWaiters(t *testing.T) {
	var woken []string
	w := newStoreWaiters(10*time.Second, func(k types.NamespacedName) { woken = append(woken, k.String()) })
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "a", Name: name} }
	now := time.Unix(1000, 0)
	const fallback = time.Minute

	if d := w.wait("dead", key("s1"), now, fallback); d < 10*time.Second || d > 15*time.Second {
		t.Errorf("the first waiter waits %s; want the probe interval, 10-15s", d)
	}
	if d := w.wait("dead", key("s2"), now.Add(time.Second), fallback); d != fallback {
		t.Errorf("a second waiter waits %s; want the fallback %s", d, fallback)
	}
	if d := w.wait("dead", key("s1"), now.Add(12*time.Second), fallback); d > 15*time.Second {
		t.Errorf("the prober, looking again, waits %s; want the probe interval", d)
	}
	if d := w.wait("other", key("s3"), now, fallback); d > 15*time.Second {
		t.Errorf("the first waiter of another store waits %s; want the probe interval", d)
	}
	if d := w.wait("dead", key("s2"), now.Add(40*time.Second), fallback); d > 15*time.Second {
		t.Errorf("a waiter after the prober stopped looking for 28s waits %s; want to be the prober", d)
	}

	w.closed("dead")
	slices.Sort(woken)
	if want := []string{"a/s1", "a/s2"}; !slices.Equal(woken, want) {
		t.Errorf("the breaker of dead closing woke %v; want %v", woken, want)
	}
	woken = nil
	w.closed("dead")
	if len(woken) != 0 {
		t.Errorf("closing again woke %v; want nothing (each waiter is woken once)", woken)
	}
	if d := w.wait("dead", key("s2"), now.Add(50*time.Second), fallback); d > 15*time.Second {
		t.Errorf("the first waiter after the store failed again waits %s; want the probe interval", d)
	}
}
