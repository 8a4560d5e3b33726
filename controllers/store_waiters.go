package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// storeWaiters holds the Sessions that found their store's breaker open.
// While a store is down, every Session on it would otherwise retry on its
// own, each a failed reconcile and an error in the manager's log, all
// within their namespace's reconcile rate, and come back one by one after
// the store does. Instead one of them (the prober) looks again as often
// as the breaker lets a probe through, the others wait, and all are woken
// at once when the breaker closes.
type storeWaiters struct {
	// probeEvery is how long the breaker stays open before it lets a
	// probe through.
	probeEvery time.Duration
	// wake enqueues a Session again.
	wake func(types.NamespacedName)

	mu      sync.Mutex
	waiting map[string]map[types.NamespacedName]bool
	// probers are each store's prober and when it last looked.
	probers map[string]prober
}

type prober struct {
	key    types.NamespacedName
	looked time.Time
}

func newStoreWaiters(probeEvery time.Duration, wake func(types.NamespacedName)) *storeWaiters {
	return &storeWaiters{probeEvery: probeEvery, wake: wake,
		waiting: map[string]map[types.NamespacedName]bool{}, probers: map[string]prober{}}
}

// wait registers key as waiting for store, and returns how long it waits
// before it looks again on its own: the breaker's probe interval for the
// store's prober, else fallback (it is woken before then when the store
// answers again). A prober that has not looked for two probe intervals
// (deleted, moved to another shard) is replaced by the next waiter.
func (w *storeWaiters) wait(store string, key types.NamespacedName, now time.Time, fallback time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting[store] == nil {
		w.waiting[store] = map[types.NamespacedName]bool{}
	}
	w.waiting[store][key] = true
	p, ok := w.probers[store]
	if !ok || p.key == key || now.Sub(p.looked) > 2*w.probeEvery {
		w.probers[store] = prober{key: key, looked: now}
		return jittered(w.probeEvery)
	}
	return fallback
}

// closed wakes every Session waiting for store, whose breaker has closed:
// the store answers again.
func (w *storeWaiters) closed(store string) {
	w.mu.Lock()
	keys := w.waiting[store]
	delete(w.waiting, store)
	delete(w.probers, store)
	w.mu.Unlock()
	for key := range keys {
		w.wake(key)
	}
}
