package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/controllers"
	"github.com/turnlog/turnlog/internal/telemetry"
)

func init() {
	register("manager", "run the Session and SessionFork controllers", runManager)
}

func runManager(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) int {
	fs := newFlagSet("manager", "", stderr)
	var f managerFlags
	f.bind(fs)
	config.RegisterFlags(fs)
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(fs)
	if _, code, ok := parseArgs(fs, args); !ok {
		return code
	}

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr)))
	if f.shard != "" {
		controllers.ShardMetrics(f.shard)
	}
	if err := setMemoryLimit(os.Getenv("TURNLOG_MEMORY_LIMIT")); err != nil {
		return fail(stderr, "manager", err)
	}
	// Flag values the manager cannot run with are usage errors (exit 2).
	resources, err := f.check()
	if err != nil {
		return usageError(fs, err)
	}
	stores, err := managerStores(f.storeURL, f.stores, f.storesFile)
	if err != nil {
		return fail(stderr, "manager", err)
	}
	defer closeWithin(stores, 5*time.Second)
	tel, err := telemetry.Start(ctx, f.otlp, "turnlog-manager")
	if err != nil {
		return fail(stderr, "manager", err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	mgr, err := f.newManager()
	if err != nil {
		return fail(stderr, "manager", err)
	}
	cfg := f.controllersConfig(stores, resources)
	if f.workerMode == controllers.WorkerModePod {
		if cfg.Pool, err = f.poolSettings(resources); err != nil {
			return fail(stderr, "manager", err)
		}
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

// managerFlags are `turnlog manager`'s own flags.
type managerFlags struct {
	metricsAddr, probeAddr            string
	secureMetrics, http2, leaderElect bool
	leaderElectionNamespace           string
	storeURL, storesFile              string
	stores                            []controllers.StoreConfig
	namespaces                        []string
	shard                             string
	storeTimeout, reconcileDeadline   time.Duration
	forkCopyTimeout                   time.Duration
	forkPrefix                        string
	deletionTimeout, orphanSweep      time.Duration
	orphanNamespace                   string
	pollInterval, maxPollInterval     time.Duration
	workerMode, workerImage           string
	workerSA, workerSecret            string
	workerCPU, workerCPULimit         string
	workerMemory                      string
	workerMaxFailures                 int
	workerDeadline                    time.Duration
	workerEndpoint, workerListen      string
	workerPodRuns                     int
	workerIdle                        time.Duration
	limits                            controllers.Limits
	otlp                              telemetry.Flags
}

func (f *managerFlags) bind(fs *flag.FlagSet) {
	f.otlp.Bind(fs)
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", "0", "address of the metrics endpoint, e.g. :8443 (HTTPS) or :8080 (HTTP); 0 disables it")
	fs.BoolVar(&f.secureMetrics, "metrics-secure", true, "serve metrics over HTTPS, authenticated and authorized through the API server")
	fs.BoolVar(&f.http2, "enable-http2", false, "serve metrics over HTTP/2 too (off: HTTP/2 Rapid Reset and Stream Cancellation CVEs)")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "elect a leader, so that only one manager reconciles at a time")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease the replicas elect their leader with (--leader-elect); default: the manager pod's own, which a manager run outside the cluster does not have")
	fs.StringVar(&f.storeURL, "store-url", "", "URL of the store named \"default\", the store of Sessions without spec.storage.store (s3://, gs://, azblob://, file://, mem://)")
	fs.Func("store", "a named store Sessions can pick with spec.storage.store, as NAME=URL (repeatable)", func(v string) error {
		sc, err := controllers.ParseStoreFlag(v)
		f.stores = append(f.stores, sc)
		return err
	})
	fs.StringVar(&f.storesFile, "stores-file", "", "file of named stores, one \"NAME URL [PREFIX]\" per line (e.g. a mounted ConfigMap key)")
	fs.Func("watch-namespace", "watch only this namespace (repeatable); the manager then needs permissions only there; default: every namespace", func(v string) error {
		if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
			return fmt.Errorf("%q: %s", v, strings.Join(errs, "; "))
		}
		f.namespaces = append(f.namespaces, v)
		return nil
	})
	fs.Func("shard", "reconcile only the Sessions and SessionForks labelled turnlog.dev/shard=NAME, electing a leader with a Lease of the shard's own, and label the metrics shard=NAME (docs/scaling.md); default: every one", func(v string) error {
		if err := controllers.ValidateShard(v); err != nil {
			return err
		}
		f.shard = v
		return nil
	})
	fs.DurationVar(&f.storeTimeout, "store-timeout", controllers.DefaultStoreTimeout, "how long one look at a Session may wait for its store (the probe, the head, the checkpoints) before it is reported StoreUnavailable and retried")
	fs.DurationVar(&f.forkCopyTimeout, "fork-copy-timeout", controllers.DefaultForkCopyTimeout, "how long one fork's cut and copy may wait for its store before they are cancelled, the copy slot is given back and the fork is retried with backoff")
	fs.StringVar(&f.forkPrefix, "fork-prefix", controllers.ForkPrefixReference, "how a fork's child holds its source's prefix: reference (it refers to the source's segments, and writes only the segment holding the cut) or copy (it copies them, as managers before forks by reference did: for a store that such a manager also reads)")
	fs.DurationVar(&f.reconcileDeadline, "reconcile-deadline", controllers.DefaultReconcileDeadline, "how long one reconcile (worker runs inside the manager included) may run before its context ends; one still running a minute later fails the liveness check (/healthz), so the manager is restarted")
	fs.DurationVar(&f.deletionTimeout, "deletion-timeout", controllers.DefaultDeletionTimeout, "how long a deleted Session with retention Delete waits for its store before it is released with its log left in place")
	fs.StringVar(&f.orphanNamespace, "orphan-namespace", os.Getenv("POD_NAMESPACE"), "namespace where a log left in place by --deletion-timeout is recorded (a ConfigMap labelled "+controllers.LabelOrphanedLog+") until the orphan sweep deletes it; default: the manager's own ($POD_NAMESPACE); empty: not recorded, only the LogOrphaned Event names it")
	fs.DurationVar(&f.orphanSweep, "orphan-sweep-interval", controllers.DefaultOrphanSweepInterval, "how often recorded orphaned logs are deleted again")
	fs.DurationVar(&f.pollInterval, "poll-interval", time.Minute, "how often a busy Session's log is looked at without a nudge")
	fs.DurationVar(&f.maxPollInterval, "max-poll-interval", time.Hour, "how seldom a Session whose log has been quiet at least this long is looked at without a nudge")
	fs.StringVar(&f.workerMode, "worker-mode", controllers.WorkerModePod, "where assembly and replay run: pod (worker pods that stay while their namespace is busy) or local (inside the manager)")
	fs.StringVar(&f.workerImage, "worker-image", "", "image of worker pods; its entrypoint is the turnlog binary")
	fs.StringVar(&f.workerSA, "worker-service-account", "", "service account of worker pods (its token is never mounted); empty: the namespace's default")
	fs.StringVar(&f.workerSecret, "worker-credentials-secret", "", "Secret in each Session's namespace whose keys become the worker's environment (store credentials)")
	fs.StringVar(&f.workerCPU, "worker-cpu-request", "100m", "CPU request of a worker pod")
	fs.StringVar(&f.workerCPULimit, "worker-cpu-limit", "1", "CPU limit of a worker pod; 0 for none")
	fs.IntVar(&f.workerMaxFailures, "worker-max-failures", controllers.DefaultWorkerMaxFailures, "failed attempts of a worker run before it is given up until the Session is nudged or its spec changes")
	fs.StringVar(&f.workerMemory, "worker-memory-limit", "512Mi", "memory request and limit of a worker pod")
	fs.DurationVar(&f.workerDeadline, "worker-active-deadline", 15*time.Minute, "longest one worker run may take before it is given up as failed")
	fs.StringVar(&f.workerEndpoint, "worker-endpoint", "", "URL worker pods dial for runs, https://HOST:PORT; default: https://$POD_IP and the port of --worker-listen")
	fs.StringVar(&f.workerListen, "worker-listen", ":9444", "address the manager serves worker pods on")
	fs.IntVar(&f.workerPodRuns, "worker-pod-runs", controllers.DefaultWorkerPodRuns, "runs one worker pod works on at once")
	fs.DurationVar(&f.workerIdle, "worker-idle-timeout", controllers.DefaultWorkerIdleTimeout, "how long a namespace keeps its worker pods with nothing to do")
	l := &f.limits
	fs.IntVar(&l.ConcurrentReconciles, "concurrent-reconciles", controllers.DefaultConcurrentReconciles, "reconciles each controller (Sessions, SessionForks) runs at once")
	fs.IntVar(&l.NamespaceConcurrentReconciles, "namespace-concurrent-reconciles", controllers.DefaultNamespaceConcurrentReconciles, "of those, how many one namespace's objects may hold, so that other namespaces always find one free")
	fs.Float64Var(&l.NamespaceReconcileRate, "namespace-reconcile-rate", 0, "reconciles per second each controller gives one namespace's objects (nudges, polls, appends); over it they wait, coalesced; 0: no limit")
	fs.IntVar(&l.NamespaceReconcileBurst, "namespace-reconcile-burst", 0, "bursts allowed over --namespace-reconcile-rate; 0: twice the rate")
	fs.IntVar(&l.NamespaceWorkerRuns, "namespace-worker-runs", controllers.DefaultNamespaceWorkerRuns, "worker runs (on worker pods, or inside the manager) one namespace may have going at once")
	fs.IntVar(&l.LocalWorkerRuns, "local-worker-runs", controllers.DefaultLocalWorkerRuns, "worker runs the manager runs at once inside its own process (--worker-mode=local)")
	fs.IntVar(&l.ForkCopies, "fork-copies", controllers.DefaultForkCopies, "forks the manager cuts and copies at once")
	fs.IntVar(&l.NamespaceForkCopies, "namespace-fork-copies", controllers.DefaultNamespaceForkCopies, "of those, how many may be one namespace's")
}

// check refuses flag values the manager cannot run with, and returns the
// worker pods' resources.
func (f *managerFlags) check() (corev1.ResourceRequirements, error) {
	resources, err := workerResources(f.workerCPU, f.workerCPULimit, f.workerMemory)
	switch {
	case err != nil:
		return resources, err
	case f.workerMaxFailures < 1:
		return resources, fmt.Errorf("--worker-max-failures %d: must be at least 1", f.workerMaxFailures)
	case f.storeTimeout <= 0:
		return resources, fmt.Errorf("--store-timeout %s: must be positive", f.storeTimeout)
	case f.forkPrefix != controllers.ForkPrefixReference && f.forkPrefix != controllers.ForkPrefixCopy:
		return resources, fmt.Errorf("--fork-prefix %q: must be %s or %s", f.forkPrefix, controllers.ForkPrefixReference, controllers.ForkPrefixCopy)
	case f.forkCopyTimeout <= 0:
		return resources, fmt.Errorf("--fork-copy-timeout %s: must be positive", f.forkCopyTimeout)
	case f.deletionTimeout <= 0:
		return resources, fmt.Errorf("--deletion-timeout %s: must be positive", f.deletionTimeout)
	case f.reconcileDeadline <= 0:
		return resources, fmt.Errorf("--reconcile-deadline %s: must be positive", f.reconcileDeadline)
	case f.workerPodRuns < 1:
		return resources, fmt.Errorf("--worker-pod-runs %d: must be at least 1", f.workerPodRuns)
	case f.workerIdle <= 0:
		return resources, fmt.Errorf("--worker-idle-timeout %s: must be positive", f.workerIdle)
	case f.otlp.Check() != nil:
		return resources, f.otlp.Check()
	}
	return resources, checkLimits(f.limits)
}

// newManager makes the controller-runtime manager: scheme, metrics,
// probes, leader election and the cache the flags ask for.
func (f *managerFlags) newManager() (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(turnlogv1.AddToScheme(scheme))
	var tlsOpts []func(*tls.Config)
	if !f.http2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{BindAddress: f.metricsAddr, SecureServing: f.secureMetrics, TLSOpts: tlsOpts}
	if f.secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        controllers.LeaderElectionID(f.shard),
		LeaderElectionNamespace: f.leaderElectionNamespace,
		// Within the Deployment's terminationGracePeriodSeconds: reconciles
		// that do not end by then are abandoned, not waited for.
		GracefulShutdownTimeout: ptr.To(shutdownGrace),
		Cache:                   controllers.ShardCacheOptions(controllers.CacheOptions(f.namespaces...), f.shard),
	})
	if err != nil {
		return nil, fmt.Errorf("create the manager: %w", err)
	}
	return mgr, nil
}

// controllersConfig is the controllers' configuration from the flags.
func (f *managerFlags) controllersConfig(stores controllers.Stores, resources corev1.ResourceRequirements) controllers.Config {
	return controllers.Config{
		Stores:              stores,
		WorkerMode:          f.workerMode,
		PollInterval:        f.pollInterval,
		MaxPollInterval:     f.maxPollInterval,
		WorkerMaxFailures:   int32(f.workerMaxFailures),
		DeletionTimeout:     f.deletionTimeout,
		StoreTimeout:        f.storeTimeout,
		ForkCopyTimeout:     f.forkCopyTimeout,
		ForkPrefix:          f.forkPrefix,
		Limits:              f.limits,
		ReconcileDeadline:   f.reconcileDeadline,
		OrphanNamespace:     f.orphanNamespace,
		OrphanSweepInterval: f.orphanSweep,
		Shard:               f.shard,
	}
}

// poolSettings are the worker pods' settings in pod mode; the endpoint's
// certificate and the tokens' key are made when the manager starts.
func (f *managerFlags) poolSettings(resources corev1.ResourceRequirements) (controllers.PoolSettings, error) {
	endpoint := f.workerEndpoint
	if endpoint == "" {
		_, port, err := net.SplitHostPort(f.workerListen)
		podIP := os.Getenv("POD_IP")
		if err != nil || podIP == "" {
			return controllers.PoolSettings{}, fmt.Errorf("--worker-mode=pod: set --worker-endpoint (the URL worker pods dial), or POD_IP and a --worker-listen with a port")
		}
		endpoint = "https://" + net.JoinHostPort(podIP, port)
	}
	return controllers.PoolSettings{
		Image: f.workerImage, ServiceAccount: f.workerSA, CredentialsSecret: f.workerSecret, Resources: resources,
		Endpoint: endpoint, Listen: f.workerListen,
		RunsPerPod: f.workerPodRuns, IdleTimeout: f.workerIdle, MaxRunTime: f.workerDeadline, Namespaces: f.namespaces,
		OTLP: f.otlp,
	}, nil
}

// shutdownGrace is how long the manager waits for its reconciles after
// SIGTERM before it exits anyway; config/manager gives the pod 30s.
const shutdownGrace = 20 * time.Second

// closeWithin closes the stores, but does not wait longer than d: a store
// call that never returns must not keep a stopping manager alive.
func closeWithin(c io.Closer, d time.Duration) {
	done := make(chan struct{})
	go func() {
		_ = c.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// memoryLimitShare is the part of the container's memory limit the Go
// runtime aims to stay under; the rest is for what the runtime does not
// count (stacks, the binary, cgroup page cache).
const memoryLimitShare = 0.9

// setMemoryLimit sets the Go memory limit to memoryLimitShare of container,
// the container's memory limit in bytes (TURNLOG_MEMORY_LIMIT, which the
// Deployment fills in from limits.memory), unless GOMEMLIMIT is set: then
// the operator chose. Without a limit the heap may grow to twice what is
// live before a collection, which under a burst of work is what takes a
// manager past its container's limit.
func setMemoryLimit(container string) error {
	if container == "" || os.Getenv("GOMEMLIMIT") != "" {
		return nil
	}
	q, err := resource.ParseQuantity(container)
	if err != nil {
		return fmt.Errorf("TURNLOG_MEMORY_LIMIT %q: %w", container, err)
	}
	if q.Sign() <= 0 {
		return nil
	}
	limit := int64(float64(q.Value()) * memoryLimitShare)
	debug.SetMemoryLimit(limit)
	ctrl.Log.Info("Go memory limit set", "bytes", limit, "containerLimit", q.String())
	return nil
}

// checkLimits refuses limits the manager could not share fairly with.
func checkLimits(l controllers.Limits) error {
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{
		{"concurrent-reconciles", l.ConcurrentReconciles, 1},
		{"namespace-concurrent-reconciles", l.NamespaceConcurrentReconciles, 1},
		{"namespace-reconcile-burst", l.NamespaceReconcileBurst, 0},
		{"namespace-worker-runs", l.NamespaceWorkerRuns, 1},
		{"local-worker-runs", l.LocalWorkerRuns, 1},
		{"fork-copies", l.ForkCopies, 1},
		{"namespace-fork-copies", l.NamespaceForkCopies, 1},
	} {
		if f.v < f.min {
			return fmt.Errorf("--%s %d: must be at least %d", f.name, f.v, f.min)
		}
	}
	if l.NamespaceReconcileRate < 0 {
		return fmt.Errorf("--namespace-reconcile-rate %g: must not be negative", l.NamespaceReconcileRate)
	}
	if n := l.NamespaceConcurrentReconciles; n >= l.ConcurrentReconciles && l.ConcurrentReconciles > 1 {
		return fmt.Errorf("--namespace-concurrent-reconciles %d: must be below --concurrent-reconciles %d, or one namespace can hold every reconcile", n, l.ConcurrentReconciles)
	}
	return nil
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
