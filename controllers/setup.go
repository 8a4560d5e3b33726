package controllers

import (
	"cmp"
	"context"
	"fmt"
	"k8s.io/utils/clock"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/store"
)

// Worker modes.
const (
	// WorkerModePod hands each worker run to worker pods that stay while
	// their namespace is busy (PoolWorkers; the default on clusters).
	WorkerModePod = "pod"
	// WorkerModeLocal runs the worker inside the manager, for machines
	// without a kubelet.
	WorkerModeLocal = "local"
)

// Config configures the turnlog controllers.
type Config struct {
	Stores Stores
	// Clock measures spec.deleteAfterIdle; nil is the real clock.
	Clock clock.PassiveClock
	// WorkerMode is WorkerModePod or WorkerModeLocal.
	WorkerMode string
	// Pool configures the worker pods in pod mode.
	Pool PoolSettings
	// PollInterval bounds how long an append made without a nudge goes
	// unnoticed in a Session that is busy; MaxPollInterval (if longer) in
	// one whose log has been quiet that long.
	PollInterval, MaxPollInterval time.Duration
	// WorkerMaxFailures is how many failed attempts a worker run gets
	// before it is given up (until a nudge or a spec change); zero is
	// DefaultWorkerMaxFailures.
	WorkerMaxFailures int32
	// DeletionTimeout bounds how long a deleted Session waits for its
	// store; zero is DefaultDeletionTimeout.
	DeletionTimeout time.Duration
	// StoreTimeout bounds the store requests of one look at a Session (the
	// probe, the head, the checkpoints); zero is DefaultStoreTimeout.
	StoreTimeout time.Duration
	// ForkCopyTimeout bounds the cut and the copy of one fork (its store
	// reads and writes); zero is DefaultForkCopyTimeout.
	ForkCopyTimeout time.Duration
	// ForkPrefix is how forks seed their children: ForkPrefixReference
	// ("" too) or ForkPrefixCopy.
	ForkPrefix string
	// Limits share the manager between namespaces; zero fields take their
	// defaults.
	Limits Limits
	// ReconcileDeadline bounds one reconcile (watchdog.go); zero is
	// DefaultReconcileDeadline.
	ReconcileDeadline time.Duration
	// OrphanNamespace is the manager's own namespace, where logs a deleted
	// Session left in a failing store are recorded (orphans.go) and swept
	// every OrphanSweepInterval (zero is DefaultOrphanSweepInterval); ""
	// records nothing.
	OrphanNamespace     string
	OrphanSweepInterval time.Duration
	// Shard, if set, is the shard this manager reconciles: the Sessions
	// and SessionForks labelled turnlog.dev/shard with it, which are all
	// its cache must hold (ShardCacheOptions). Empty: every one, as one
	// manager does.
	Shard string
}

// Defaults of Config.
const (
	DefaultWorkerMaxFailures = 5
	DefaultDeletionTimeout   = 10 * time.Minute
	DefaultStoreTimeout      = 30 * time.Second
	DefaultForkCopyTimeout   = 5 * time.Minute
)

// CacheOptions drops managed fields from what the manager caches: the
// controllers never read them, and they are a good part of a small
// object's size. When namespaces are given, it caches only those
// namespaces: the manager then needs its permissions only there (Roles
// instead of a ClusterRole; see config/namespaced). The worker pods'
// Deployments, Secrets and pods are read straight from the API server,
// never cached: the manager would otherwise hold every Deployment and
// Secret of the cluster.
func CacheOptions(namespaces ...string) cache.Options {
	opts := cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// Setup registers the Session and SessionFork controllers with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("turnlog")
	watch := newWatchdog(cfg.ReconcileDeadline, recorder)
	if err := mgr.AddHealthzCheck("reconciles", watch.Check); err != nil {
		return err
	}
	if err := setupSessions(mgr, cfg, recorder, watch); err != nil {
		return err
	}
	if err := setupForks(ctx, mgr, cfg, recorder, watch); err != nil {
		return err
	}
	return addStatusMetrics(mgr)
}

// withDefaults fills in zero fields that have a default, and checks the
// others.
func (c Config) withDefaults() (Config, error) {
	if c.PollInterval <= 0 {
		return c, fmt.Errorf("poll interval must be positive, got %s", c.PollInterval)
	}
	if c.MaxPollInterval != 0 && c.MaxPollInterval < c.PollInterval {
		return c, fmt.Errorf("max poll interval %s is shorter than the poll interval %s", c.MaxPollInterval, c.PollInterval)
	}
	if c.Shard != "" {
		if err := ValidateShard(c.Shard); err != nil {
			return c, err
		}
		c.Pool.shard = c.Shard
	}
	if c.WorkerMaxFailures < 0 {
		return c, fmt.Errorf("worker max failures must not be negative, got %d", c.WorkerMaxFailures)
	}
	c.WorkerMaxFailures = cmp.Or(c.WorkerMaxFailures, DefaultWorkerMaxFailures)
	for _, d := range []struct {
		name  string
		value *time.Duration
		def   time.Duration
	}{
		{"deletion timeout", &c.DeletionTimeout, DefaultDeletionTimeout},
		{"store timeout", &c.StoreTimeout, DefaultStoreTimeout},
		{"fork copy timeout", &c.ForkCopyTimeout, DefaultForkCopyTimeout},
		{"reconcile deadline", &c.ReconcileDeadline, DefaultReconcileDeadline},
		{"orphan sweep interval", &c.OrphanSweepInterval, DefaultOrphanSweepInterval},
	} {
		if *d.value < 0 {
			return c, fmt.Errorf("%s must not be negative, got %s", d.name, *d.value)
		}
		*d.value = cmp.Or(*d.value, d.def)
	}
	var err error
	c.Limits, err = c.Limits.withDefaults()
	return c, err
}

// setupSessions registers the Session controller, with the workers of
// cfg's worker mode and, if cfg names a namespace for it, the ledger of
// the logs deletion leaves behind.
func setupSessions(mgr ctrl.Manager, cfg Config, recorder events.EventRecorder, watch *watchdog) error {
	sessions := &SessionReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Stores: cfg.Stores,
		PollInterval: cfg.PollInterval, MaxPollInterval: cfg.MaxPollInterval,
		MaxWorkerFailures: cfg.WorkerMaxFailures, DeletionTimeout: cfg.DeletionTimeout,
		StoreTimeout: cfg.StoreTimeout, queue: &fairQueue{limits: cfg.Limits}, watchdog: watch,
		Clock: cfg.Clock,
	}
	if cfg.Shard != "" {
		sessions.handover = &handover{shard: cfg.Shard, grace: HandoverGrace}
	}
	if cfg.OrphanNamespace != "" {
		sessions.orphans = &orphanLedger{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: recorder, Stores: cfg.Stores,
			Namespace: cfg.OrphanNamespace, Interval: cfg.OrphanSweepInterval, Timeout: cfg.DeletionTimeout,
			Shard: cfg.Shard,
		}
		if err := mgr.Add(sessions.orphans); err != nil {
			return err
		}
	}
	sessions.wakeups = make(wakeups, 1024)
	if bc, ok := cfg.Stores.(interface{ OnBreakerClosed(func(string)) }); ok {
		sessions.storeWaiters = newStoreWaiters(store.DefaultBreakerOpenFor, sessions.wakeups.waker(func(k types.NamespacedName) client.Object {
			return &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
		}))
		bc.OnBreakerClosed(sessions.storeWaiters.closed)
	}
	workers, err := newWorkers(mgr, cfg, sessions.wakeups)
	if err != nil {
		return err
	}
	sessions.Workers = workers
	if err := sessions.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the Session controller: %w", err)
	}
	return nil
}

// newWorkers returns the workers of cfg's worker mode, which wake Sessions
// through wake.
func newWorkers(mgr ctrl.Manager, cfg Config, wake wakeups) (Workers, error) {
	switch cfg.WorkerMode {
	case WorkerModeLocal:
		return &LocalWorkers{slots: slots{
			total: cfg.Limits.LocalWorkerRuns, totalName: "local-worker-runs",
			perNamespace: cfg.Limits.NamespaceWorkerRuns, perNamespaceName: "namespace-worker-runs",
			wake: wake.waker(func(k types.NamespacedName) client.Object {
				return &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
			}),
		}}, nil
	case WorkerModePod:
		pool, err := newPoolWorkers(mgr.GetClient(), mgr.GetAPIReader(), cfg.Pool, cfg.Limits.NamespaceWorkerRuns, func(k types.NamespacedName) {
			// A finished run's wake-up is how its Session learns of it:
			// never dropped, unlike a slot's.
			go func() {
				wake <- event.GenericEvent{Object: &turnlogv1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}
			}()
		})
		if err != nil {
			return nil, err
		}
		return pool, mgr.Add(pool)
	}
	return nil, fmt.Errorf("unknown worker mode %q (want %s or %s)", cfg.WorkerMode, WorkerModePod, WorkerModeLocal)
}

// setupForks registers the SessionFork controller, with the copy slots its
// forks share.
func setupForks(ctx context.Context, mgr ctrl.Manager, cfg Config, recorder events.EventRecorder, watch *watchdog) error {
	forkWakeups := make(wakeups, 1024)
	forks := &SessionForkReconciler{Client: mgr.GetClient(), Recorder: recorder, Stores: cfg.Stores, PollInterval: cfg.PollInterval,
		CopyTimeout: cfg.ForkCopyTimeout, CopyPrefixes: cfg.ForkPrefix == ForkPrefixCopy,
		queue: &fairQueue{limits: cfg.Limits}, watchdog: watch, wakeups: forkWakeups,
		copies: &slots{
			total: cfg.Limits.ForkCopies, totalName: "fork-copies",
			perNamespace: cfg.Limits.NamespaceForkCopies, perNamespaceName: "namespace-fork-copies",
			wake: forkWakeups.waker(func(k types.NamespacedName) client.Object {
				return &turnlogv1.SessionFork{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
			}),
		},
	}
	if cfg.Shard != "" {
		forks.Sessions = mgr.GetAPIReader()
	}
	if err := forks.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up the SessionFork controller: %w", err)
	}
	return nil
}
