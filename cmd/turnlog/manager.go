package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/controllers"
)

func init() {
	register("manager", "run the Session and SessionFork controllers", runManager)
}

func runManager(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) int {
	fs := newFlagSet("manager", "", stderr)
	metricsAddr := fs.String("metrics-bind-address", "0", "address of the metrics endpoint, e.g. :8443 (HTTPS) or :8080 (HTTP); 0 disables it")
	secureMetrics := fs.Bool("metrics-secure", true, "serve metrics over HTTPS, authenticated and authorized through the API server")
	enableHTTP2 := fs.Bool("enable-http2", false, "serve metrics over HTTP/2 too (off: HTTP/2 Rapid Reset and Stream Cancellation CVEs)")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	leaderElect := fs.Bool("leader-elect", false, "elect a leader, so that only one manager reconciles at a time")
	storeURL := fs.String("store-url", "", "URL of the store named \"default\", the store of Sessions without spec.storage.store (s3://, gs://, azblob://, file://, mem://)")
	var storeFlags []controllers.StoreConfig
	fs.Func("store", "a named store Sessions can pick with spec.storage.store, as NAME=URL (repeatable)", func(v string) error {
		sc, err := controllers.ParseStoreFlag(v)
		storeFlags = append(storeFlags, sc)
		return err
	})
	storesFile := fs.String("stores-file", "", "file of named stores, one \"NAME URL [PREFIX]\" per line (e.g. a mounted ConfigMap key)")
	var namespaces []string
	fs.Func("watch-namespace", "watch only this namespace (repeatable); the manager then needs permissions only there; default: every namespace", func(v string) error {
		if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
			return fmt.Errorf("%q: %s", v, strings.Join(errs, "; "))
		}
		namespaces = append(namespaces, v)
		return nil
	})
	storeTimeout := fs.Duration("store-timeout", controllers.DefaultStoreTimeout, "how long one look at a Session may wait for its store (the probe, the head, the checkpoints) before it is reported StoreUnavailable and retried")
	deletionTimeout := fs.Duration("deletion-timeout", controllers.DefaultDeletionTimeout, "how long a deleted Session with retention Delete waits for its store before it is released with its log left in place")
	pollInterval := fs.Duration("poll-interval", time.Minute, "how often a busy Session's log is looked at without a nudge")
	maxPollInterval := fs.Duration("max-poll-interval", time.Hour, "how seldom a Session whose log has been quiet at least this long is looked at without a nudge")
	workerMode := fs.String("worker-mode", controllers.WorkerModePod, "where assembly and replay run: pod (a Job per run) or local (inside the manager)")
	workerImage := fs.String("worker-image", "", "image of worker pods; its entrypoint is the turnlog binary")
	workerSA := fs.String("worker-service-account", "", "service account of worker pods (its token is never mounted); empty: the namespace's default")
	workerSecret := fs.String("worker-credentials-secret", "", "Secret in each Session's namespace whose keys become the worker's environment (store credentials)")
	workerCPU := fs.String("worker-cpu-request", "100m", "CPU request of a worker pod")
	workerCPULimit := fs.String("worker-cpu-limit", "1", "CPU limit of a worker pod; 0 for none")
	workerMaxFailures := fs.Int("worker-max-failures", controllers.DefaultWorkerMaxFailures, "failed attempts of a worker run before it is given up until the Session is nudged or its spec changes")
	workerMemory := fs.String("worker-memory-limit", "512Mi", "memory request and limit of a worker pod")
	workerBackoff := fs.Int("worker-backoff-limit", 3, "pod retries of a worker Job before it fails")
	workerDeadline := fs.Duration("worker-active-deadline", 15*time.Minute, "longest a worker Job may run, retries included")
	workerTTL := fs.Duration("worker-ttl-after-finished", time.Hour, "how long finished worker Jobs are kept")
	config.RegisterFlags(fs)
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(fs)
	if _, code, ok := parseArgs(fs, args); !ok {
		return code
	}

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr)))
	// Flag values the manager cannot run with are usage errors (exit 2).
	resources, err := workerResources(*workerCPU, *workerCPULimit, *workerMemory)
	if err != nil {
		return usageError(fs, err)
	}
	if *workerMaxFailures < 1 {
		return usageError(fs, fmt.Errorf("--worker-max-failures %d: must be at least 1", *workerMaxFailures))
	}
	if *storeTimeout <= 0 {
		return usageError(fs, fmt.Errorf("--store-timeout %s: must be positive", *storeTimeout))
	}
	if *deletionTimeout <= 0 {
		return usageError(fs, fmt.Errorf("--deletion-timeout %s: must be positive", *deletionTimeout))
	}
	stores, err := managerStores(*storeURL, storeFlags, *storesFile)
	if err != nil {
		return fail(stderr, "manager", err)
	}
	defer stores.Close()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(turnlogv1.AddToScheme(scheme))

	var tlsOpts []func(*tls.Config)
	if !*enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{BindAddress: *metricsAddr, SecureServing: *secureMetrics, TLSOpts: tlsOpts}
	if *secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fail(stderr, "manager", err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: *probeAddr,
		LeaderElection:         *leaderElect,
		LeaderElectionID:       "turnlog-manager.turnlog.dev",
		Cache:                  controllers.CacheOptions(namespaces...),
	})
	if err != nil {
		return fail(stderr, "manager", fmt.Errorf("create the manager: %w", err))
	}
	cfg := controllers.Config{
		Stores:            stores,
		WorkerMode:        *workerMode,
		PollInterval:      *pollInterval,
		MaxPollInterval:   *maxPollInterval,
		WorkerMaxFailures: int32(*workerMaxFailures),
		DeletionTimeout:   *deletionTimeout,
		StoreTimeout:      *storeTimeout,
		Jobs: controllers.JobWorkers{
			Image:                   *workerImage,
			ServiceAccount:          *workerSA,
			CredentialsSecret:       *workerSecret,
			Resources:               resources,
			BackoffLimit:            int32(*workerBackoff),
			ActiveDeadlineSeconds:   int64(workerDeadline.Seconds()),
			TTLSecondsAfterFinished: int32(workerTTL.Seconds()),
		},
	}
	if err := controllers.Setup(ctx, mgr, cfg); err != nil {
		return fail(stderr, "manager", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fail(stderr, "manager", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fail(stderr, "manager", err)
	}
	if err := mgr.Start(ctx); err != nil {
		return fail(stderr, "manager", err)
	}
	return 0
}

// managerStores gathers the named stores from --store-url (the store named
// "default"), --store and --stores-file.
func managerStores(defaultURL string, flags []controllers.StoreConfig, file string) (*controllers.BucketCache, error) {
	var all []controllers.StoreConfig
	if defaultURL != "" {
		all = append(all, controllers.StoreConfig{Name: turnlogv1.DefaultStore, URL: defaultURL})
	}
	all = append(all, flags...)
	if file != "" {
		fromFile, err := controllers.ReadStoresFile(file)
		if err != nil {
			return nil, fmt.Errorf("--stores-file: %w", err)
		}
		all = append(all, fromFile...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no store configured: give --store-url, --store or --stores-file")
	}
	return controllers.NewBucketCache(all, nil)
}

func workerResources(cpu, cpuLimit, memory string) (corev1.ResourceRequirements, error) {
	c, err := resource.ParseQuantity(cpu)
	if err != nil {
		return corev1.ResourceRequirements{}, fmt.Errorf("--worker-cpu-request %q: %w", cpu, err)
	}
	cl, err := resource.ParseQuantity(cpuLimit)
	if err != nil {
		return corev1.ResourceRequirements{}, fmt.Errorf("--worker-cpu-limit %q: %w", cpuLimit, err)
	}
	m, err := resource.ParseQuantity(memory)
	if err != nil {
		return corev1.ResourceRequirements{}, fmt.Errorf("--worker-memory-limit %q: %w", memory, err)
	}
	limits := corev1.ResourceList{corev1.ResourceMemory: m}
	if !cl.IsZero() {
		if cl.Cmp(c) < 0 {
			return corev1.ResourceRequirements{}, fmt.Errorf("--worker-cpu-limit %s is below --worker-cpu-request %s", cpuLimit, cpu)
		}
		limits[corev1.ResourceCPU] = cl
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: c, corev1.ResourceMemory: m},
		Limits:   limits,
	}, nil
}
