package controllers

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/fairqueue"
)

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
)

func init() {
	metrics.Registry.MustRegister(queueDepth, queueWait, queueHeld)
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
