package alerts

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TurnlogReconcilePanics counts controller-runtime's recovered panics of
// the controllers named session and sessionfork. No input makes turnlog's
// manager panic (one that did would be a bug to fix, not a trigger to
// keep), so the test proves the alert with controller-runtime's own panic
// handling: this test binary, run again with panickingControllerEnv set,
// is a controller-runtime manager with one controller named sessionfork
// that panics on one ConfigMap, serving its metrics as turnlog's manager
// does (HTTPS, authenticated and authorized through the API server). Its
// metrics endpoint is a second target of the manager's scrape job, as a
// second replica would be. It is named sessionfork, not session, so that
// it cannot stand in for the manager in the alerts about the session
// controller (TurnlogReconcileErrors, TurnlogQueueSlow,
// TurnlogManagerAbsent).

// panickingControllerEnv holds the metrics address of the panicking
// controller; the kubeconfig is $KUBECONFIG.
const panickingControllerEnv = "TURNLOG_ALERTS_PANICKING_CONTROLLER"

// The ConfigMap the panicking controller panics on, in the only namespace
// it watches.
const (
	panicNamespace = "panics"
	panicObject    = "panic"
)

// runPanickingController runs the panicking controller until SIGTERM.
func runPanickingController(metricsAddr string) error {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics: metricsserver.Options{
			BindAddress: metricsAddr, SecureServing: true,
			FilterProvider: filters.WithAuthenticationAndAuthorization,
		},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{panicNamespace: {}}},
	})
	if err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("sessionfork").For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Name == panicObject {
				panic(fmt.Sprintf("the alerts test's controller panics on ConfigMap %s", req.NamespacedName))
			}
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
