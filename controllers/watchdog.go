package controllers

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// A reconcile gets a context that ends after ReconcileDeadline, and every
// store call and API request in it honours that context. A call that does
// not (a kernel call that never returns, a library that ignores its
// context) would hold a reconcile, and with it its namespace's share of the
// controller, for ever, while the manager looked healthy. The watchdog
// notices: a reconcile still running OverdueAfter past its deadline is
// logged, counted, announced with an Event on its object, and fails the
// manager's liveness check, so that the kubelet restarts the manager.

var reconcilesOverdue = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "turnlog_reconciles_overdue_total",
	Help: "Reconciles still running after their deadline (--reconcile-deadline) and its grace; each one fails the liveness check until it ends.",
}, []string{"controller"})

func init() { metrics.Registry.MustRegister(reconcilesOverdue) }

// Defaults of the watchdog.
const (
	// DefaultReconcileDeadline bounds one reconcile, worker runs inside the
	// manager included (--worker-mode=local runs them in the reconcile).
	DefaultReconcileDeadline = 20 * time.Minute
	// overdueGrace is how long past its deadline a reconcile may take to
	// notice that its context ended.
	overdueGrace = time.Minute
)

// watchdog tracks the reconciles in flight.
type watchdog struct {
	deadline, grace time.Duration
	recorder        events.EventRecorder

	mu       sync.Mutex
	next     uint64
	inFlight map[uint64]*tracked
}

type tracked struct {
	controller string
	req        reconcile.Request
	obj        client.Object
	started    time.Time
	reported   bool
}

func newWatchdog(deadline time.Duration, recorder events.EventRecorder) *watchdog {
	return &watchdog{deadline: deadline, grace: overdueGrace, recorder: recorder, inFlight: map[uint64]*tracked{}}
}

// watch wraps r so that its reconciles run under the deadline and are
// tracked; newObj makes an empty object of the kind r reconciles, for
// Events.
func (w *watchdog) watch(controller string, r reconcile.Reconciler, newObj func() client.Object) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		obj := newObj()
		obj.SetNamespace(req.Namespace)
		obj.SetName(req.Name)
		w.mu.Lock()
		id := w.next
		w.next++
		w.inFlight[id] = &tracked{controller: controller, req: req, obj: obj, started: time.Now()}
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			delete(w.inFlight, id)
			w.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(ctx, w.deadline)
		defer cancel()
		return r.Reconcile(ctx, req)
	})
}

// Check is a healthz check: it fails while a reconcile is overdue, and
// reports each overdue reconcile once.
func (w *watchdog) Check(_ *http.Request) error {
	now := time.Now()
	var overdue []string
	w.mu.Lock()
	for _, t := range w.inFlight {
		running := now.Sub(t.started)
		if running < w.deadline+w.grace {
			continue
		}
		overdue = append(overdue, fmt.Sprintf("%s %s for %s", t.controller, t.req, running.Round(time.Second)))
		if !t.reported {
			t.reported = true
			reconcilesOverdue.WithLabelValues(t.controller).Inc()
			ctrl.Log.Error(nil, "reconcile overdue: it did not end when its context did; the liveness check fails until it ends",
				"controller", t.controller, "object", t.req.String(), "running", running.String(), "deadline", w.deadline.String())
			if w.recorder != nil {
				w.recorder.Eventf(t.obj, nil, "Warning", turnlogv1.EventReconcileOverdue, "Reconcile",
					"a reconcile has run for %s, past its deadline of %s (--reconcile-deadline): a call in it does not return; the manager reports itself unhealthy so that it is restarted",
					running.Round(time.Second), w.deadline)
			}
		}
	}
	w.mu.Unlock()
	if len(overdue) > 0 {
		return fmt.Errorf("%d reconciles overdue: %v", len(overdue), overdue)
	}
	return nil
}
