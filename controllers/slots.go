package controllers

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// slots counts what runs at once, in all and per namespace, for worker
// runs and fork copies: acquiring never blocks, so a reconcile that finds
// no slot reports it and comes back, instead of holding a reconcile (and
// with it other namespaces' work) while it waits.
//
// The manager's slots are shared round robin between the namespaces
// waiting for one: a slot that frees is the turn of the namespace that has
// waited longest, and a namespace that takes one waits at the back for the
// next. Without that, a slot went to whichever reconcile asked first after
// it freed, and a namespace with hundreds of runs waiting held every slot
// ahead of a namespace with one. A namespace that has not asked again
// within turnGrace (its object was deleted, or its work was done another
// way) loses its turn, so a turn never holds a slot idle for long.
//
// A slot that frees wakes one object of the namespace whose turn it is
// (wake), so the turn is taken at once rather than at that object's next
// look, slotRetry later: otherwise every turn held the slot idle for
// seconds, and a run waited for those seconds as well as for the runs
// ahead of it.
type slots struct {
	// total and perNamespace are the limits (0: none); the names are what
	// status and metrics call them.
	total, perNamespace         int
	totalName, perNamespaceName string

	mu     sync.Mutex
	inUse  int
	byName map[string]int
	// waiting are the namespaces that found every slot taken, longest
	// waiting first; asked is when each last asked for a slot.
	waiting []string
	asked   map[string]time.Time
	// waiters are the objects that found no slot, by namespace, in the
	// order they first asked; wake, if set, is given one of them when a
	// slot frees for its namespace.
	waiters map[string][]types.NamespacedName
	wake    func(types.NamespacedName)
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// turnGrace is how long a namespace keeps its turn without asking again:
// a few retries (slotRetry, jittered) of its waiting work.
const turnGrace = 3 * slotRetry

// slotsQueued counts the work tryAcquire turned away, by the limit that
// did: what an operator sizes the limits by.
var slotsQueued = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "turnlog_slot_waits_total",
	Help: "Worker runs and fork copies that could not start at once, by what they waited for (namespace-worker-runs, local-worker-runs, fork-copies, namespace-fork-copies; local worker mode and fork copies).",
}, []string{"limit"})

func init() { metrics.Registry.MustRegister(slotsQueued) }

// tryAcquire takes a slot for the object who; if none is free, or it is
// another waiting namespace's turn, it returns why, and who is woken when
// a slot frees for it.
func (s *slots) tryAcquire(who types.NamespacedName) (ok bool, limit string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	namespace := who.Namespace
	if s.asked == nil {
		s.asked = map[string]time.Time{}
	}
	if s.byName == nil {
		s.byName = map[string]int{}
	}
	s.asked[namespace] = now
	switch {
	case s.perNamespace > 0 && s.byName[namespace] >= s.perNamespace:
		s.addWaiter(who)
		slotsQueued.WithLabelValues(s.perNamespaceName).Inc()
		return false, fmt.Sprintf("namespace %s has %d going (--%s=%d)", namespace, s.byName[namespace], s.perNamespaceName, s.perNamespace)
	case s.total > 0 && s.inUse >= s.total:
		s.wait(namespace)
		s.addWaiter(who)
		slotsQueued.WithLabelValues(s.totalName).Inc()
		return false, fmt.Sprintf("the manager has %d going (--%s=%d)", s.inUse, s.totalName, s.total)
	}
	if turn := s.turn(now); turn != "" && turn != namespace {
		s.wait(namespace)
		s.addWaiter(who)
		slotsQueued.WithLabelValues(s.totalName).Inc()
		return false, fmt.Sprintf("the next free slot is namespace %s's turn (--%s=%d, shared round robin between the namespaces waiting)", turn, s.totalName, s.total)
	}
	s.waiting = slices.DeleteFunc(s.waiting, func(ns string) bool { return ns == namespace })
	s.removeWaiter(who)
	s.inUse++
	s.byName[namespace]++
	return true, ""
}

func (s *slots) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// addWaiter notes that who waits for a slot, once.
func (s *slots) addWaiter(who types.NamespacedName) {
	if s.waiters == nil {
		s.waiters = map[string][]types.NamespacedName{}
	}
	if !slices.Contains(s.waiters[who.Namespace], who) {
		s.waiters[who.Namespace] = append(s.waiters[who.Namespace], who)
	}
}

func (s *slots) removeWaiter(who types.NamespacedName) {
	ws := slices.DeleteFunc(s.waiters[who.Namespace], func(w types.NamespacedName) bool { return w == who })
	if len(ws) == 0 {
		delete(s.waiters, who.Namespace)
	} else {
		s.waiters[who.Namespace] = ws
	}
}

// wait puts namespace at the back of the waiting namespaces, unless it is
// there already.
func (s *slots) wait(namespace string) {
	if !slices.Contains(s.waiting, namespace) {
		s.waiting = append(s.waiting, namespace)
	}
}

// turn is the waiting namespace a free slot goes to: the longest waiting
// one that still asks and is under its own share; "" if none.
func (s *slots) turn(now time.Time) string {
	s.waiting = slices.DeleteFunc(s.waiting, func(ns string) bool { return now.Sub(s.asked[ns]) > turnGrace })
	if len(s.asked) > 2*len(s.waiting)+64 {
		// Forget namespaces that stopped asking, so the map stays the size
		// of the namespaces that wait.
		for ns, at := range s.asked {
			if now.Sub(at) > turnGrace {
				delete(s.asked, ns)
			}
		}
	}
	for _, ns := range s.waiting {
		if s.perNamespace <= 0 || s.byName[ns] < s.perNamespace {
			return ns
		}
	}
	return ""
}

// wakes is the namespace whose first waiter a slot freed by released is
// for: the one whose turn it is, else released (its own share freed),
// else any other with waiters under its share; "" if none.
func (s *slots) wakes(released string) string {
	if turn := s.turn(s.clock()); turn != "" {
		if len(s.waiters[turn]) > 0 {
			return turn
		}
		return "" // its turn, taken at its next look
	}
	if len(s.waiters[released]) > 0 {
		return released
	}
	for _, ns := range slices.Sorted(maps.Keys(s.waiters)) {
		if s.perNamespace <= 0 || s.byName[ns] < s.perNamespace {
			return ns
		}
	}
	return ""
}

// release frees namespace's slot and wakes the object the slot is for
// (wakes).
func (s *slots) release(namespace string) {
	s.mu.Lock()
	s.inUse--
	if s.byName[namespace]--; s.byName[namespace] <= 0 {
		delete(s.byName, namespace)
	}
	var woken types.NamespacedName
	if s.wake != nil {
		if next := s.wakes(namespace); next != "" {
			woken = s.waiters[next][0]
			s.removeWaiter(woken)
		}
	}
	s.mu.Unlock()
	if woken.Name != "" {
		s.wake(woken)
	}
}

// slotRetry is how soon work that found no slot looks again, should its
// wake-up be lost (a full channel, a manager restart).
const slotRetry = 2 * time.Second

// wakeups carries the objects a freed slot is for to their controller,
// which reconciles them at once (controllers' WatchesRawSource).
type wakeups chan event.GenericEvent

// waker returns a slots.wake that sends the object, built by newObject,
// to w, dropping it if w is full: the object's own retry takes over.
func (w wakeups) waker(newObject func(types.NamespacedName) client.Object) func(types.NamespacedName) {
	return func(key types.NamespacedName) {
		select {
		case w <- event.GenericEvent{Object: newObject(key)}:
		default:
		}
	}
}

// jittered is d plus up to half of it, so that work that found no slot at
// the same moment does not come back all at once.
func jittered(d time.Duration) time.Duration { return d + rand.N(d/2+1) }
