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
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/fairqueue"
)

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

// Queue metrics, by controller. Per-namespace labels would make the series
// grow with the tenants; Throttled Events name the namespace instead.
var (
	queueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turnlog_queue_depth",
		Help: "Objects waiting in a controller's queue to be reconciled.",
	}, []string{"controller"})
	queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "turnlog_queue_wait_seconds",
		Help:    "How long an object waited in a controller's queue before its reconcile started.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"controller"})
	queueHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnlog_queue_held_total",
		Help: "Times a controller's queue passed over a namespace with objects waiting because the namespace was at a limit (in-flight: --namespace-concurrent-reconciles; rate: --namespace-reconcile-rate).",
	}, []string{"controller", "limit"})
	slotsQueued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnlog_slot_waits_total",
		Help: "Worker runs and fork copies that could not start at once, by what they waited for (namespace-worker-runs, local-worker-runs, fork-copies, namespace-fork-copies; local worker mode and fork copies).",
	}, []string{"limit"})
	// localRunSeconds: a local run holds a slot of the manager's for its
	// whole length, so it is what another namespace's run may wait behind.
	// (A worker pod's runs are in turnlog_worker_run_seconds.)
	localRunSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "turnlog_local_worker_run_seconds",
		Help:    "How long a worker run inside the manager (--worker-mode=local) took, by task; each held a local worker slot that long.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300},
	}, []string{"task"})
)

func init() {
	metrics.Registry.MustRegister(queueDepth, queueWait, queueHeld, slotsQueued, localRunSeconds)
}

type queueMetrics struct {
	depth prometheus.Gauge
	wait  prometheus.Observer
	held  map[string]prometheus.Counter
}

func (m queueMetrics) Depth(n int)            { m.depth.Set(float64(n)) }
func (m queueMetrics) Waited(d time.Duration) { m.wait.Observe(d.Seconds()) }
func (m queueMetrics) Held(limit string)      { m.held[limit].Inc() }
func newQueueMetrics(name string) queueMetrics {
	return queueMetrics{
		depth: queueDepth.WithLabelValues(name), wait: queueWait.WithLabelValues(name),
		held: map[string]prometheus.Counter{
			fairqueue.HeldInFlight: queueHeld.WithLabelValues(name, fairqueue.HeldInFlight),
			fairqueue.HeldRate:     queueHeld.WithLabelValues(name, fairqueue.HeldRate),
		},
	}
}

// fairQueue gives a controller a queue that serves namespaces in turn
// within the namespace limits, and tells the reconciler how long an object
// was held by them.
type fairQueue struct {
	limits Limits
	queue  *fairqueue.Queue[reconcile.Request]

	mu sync.Mutex
	// lastReport is when each namespace last had a Throttled Event.
	lastReport map[string]time.Time
}

// options are the controller options that use the queue. A failed
// reconcile is retried after 1s, doubling up to maxBackoff: the poll
// interval, so that a failing object is never looked at less often than a
// healthy busy one (controller-runtime's default backs off to 16 minutes).
func (f *fairQueue) options(maxBackoff time.Duration) controller.Options {
	return controller.Options{
		MaxConcurrentReconciles: f.limits.ConcurrentReconciles,
		RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, max(maxBackoff, time.Second)),
		NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			f.queue = fairqueue.New(fairqueue.Options[reconcile.Request]{
				Tenant:      func(r reconcile.Request) string { return r.Namespace },
				MaxInFlight: f.limits.NamespaceConcurrentReconciles,
				Rate:        f.limits.NamespaceReconcileRate, Burst: f.limits.NamespaceReconcileBurst,
				RateLimiter: rl,
				Metrics:     newQueueMetrics(name),
			})
			return f.queue
		},
	}
}

// throttledAfter is how long an object must have been held by its
// namespace's limits for a Throttled Event; throttleEvery how often a
// namespace gets one at most.
const (
	throttledAfter = time.Second
	throttleEvery  = time.Minute
)

// reportHeld raises a Throttled Event on obj if its namespace's limits
// held it back noticeably, at most once a minute per namespace: enough for
// a tenant to learn why its objects are slow, not one per object of a
// flood.
func (f *fairQueue) reportHeld(req reconcile.Request, obj client.Object, recorder events.EventRecorder) {
	if f.queue == nil {
		return
	}
	held := f.queue.HeldFor(req)
	if held < throttledAfter {
		return
	}
	now := time.Now()
	f.mu.Lock()
	if f.lastReport == nil {
		f.lastReport = map[string]time.Time{}
	}
	for ns, t := range f.lastReport {
		if now.Sub(t) > throttleEvery {
			delete(f.lastReport, ns)
		}
	}
	_, recent := f.lastReport[req.Namespace]
	if !recent {
		f.lastReport[req.Namespace] = now
	}
	f.mu.Unlock()
	if recent {
		return
	}
	rate := "no rate limit"
	if f.limits.NamespaceReconcileRate > 0 {
		rate = fmt.Sprintf("--namespace-reconcile-rate=%g/s", f.limits.NamespaceReconcileRate)
	}
	recorder.Eventf(obj, nil, "Warning", turnlogv1.EventThrottled, "Reconcile",
		"waited %s behind other objects of namespace %s: the namespace had used its share of the manager (--namespace-concurrent-reconciles=%d, %s); further waits in this namespace are not announced for %s",
		held.Round(100*time.Millisecond), req.Namespace, f.limits.NamespaceConcurrentReconciles, rate, throttleEvery)
}

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
