// Package turnlogtest runs turnlog for the tests of another module: an
// agent host, or a controller that creates Sessions and SessionForks, can
// test against the real API types, CRD validation, admission policy and
// controllers without a cluster, a container engine or a checkout of
// turnlog.
//
// Start starts a Kubernetes API server and etcd with envtest, installs the
// CRDs and the admission policy turnlog's config/ installs (embedded in this
// package), and runs the Session and SessionFork controllers in the test's
// process, their worker runs (assembly, replay) inside it too, on a store
// in a temporary directory:
//
//	func TestMyHost(t *testing.T) {
//		tl := turnlogtest.Start(t)
//		st, err := agenthost.OpenStore(ctx, tl.StoreURL, nil)
//		...
//		log, err := st.CreateSession(ctx, tl.Client, "default", "chat-1", model)
//	}
//
// Everything stops when the test ends. Starting takes a few seconds (most
// of it the API server), so a package with many tests may share one Env:
// New it in TestMain and Stop it there.
//
// The control-plane binaries (kube-apiserver and etcd, as setup-envtest
// installs them) are looked for in $KUBEBUILDER_ASSETS; else in
// setup-envtest's directory (~/.local/share/kubebuilder-envtest/k8s on
// Linux), where turnlog's `make control-plane` puts them too; see
// WithControlPlane.
package turnlogtest

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/controllers"
	"github.com/turnlog/turnlog/internal/kubeapply"
)

// manifests are copies of config/crd/bases and config/admission, made by
// `make manifests` (go:embed cannot reach outside the package) and checked
// by `make verify-generated`.
//
//go:embed manifests
var manifests embed.FS

// DefaultPollInterval is how often the controllers look at a Session's log
// without a nudge, unless WithPollInterval says otherwise: short, so that
// a test that appends without nudging waits about a second rather than the
// minute a manager on a cluster waits by default.
const DefaultPollInterval = time.Second

// StartTimeout bounds Start: it usually takes a few seconds.
const StartTimeout = 2 * time.Minute

// Env is a running turnlog.
type Env struct {
	// Client acts as a cluster admin; its scheme (Scheme) has the
	// Kubernetes built-in types and turnlog.dev/v1alpha1.
	Client client.Client
	Scheme *runtime.Scheme
	// Config is the API server's address and an admin's credentials, for
	// clients of one's own.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file holding Config, for
	// kubectl or a program that reads $KUBECONFIG.
	Kubeconfig string
	// StoreURL is the URL of the object store the controllers use as the
	// store named "default" (that of Sessions without
	// spec.storage.store): what a host passes to agenthost.OpenStore.
	StoreURL string
	// ControlPlane is the directory the API server and etcd were started
	// from.
	ControlPlane string

	stopOnce sync.Once
	stopErr  error
	stop     func() error
}

// Option configures Start and New.
type Option func(*options)

type options struct {
	namespaces   []string
	pollInterval time.Duration
	workerMode   string
	workerImage  string
	storeURL     string
	controlPlane string
	logOutput    io.Writer
}

// WithNamespaces makes the controllers watch only these namespaces, as
// `turnlog manager --watch-namespace` does; objects elsewhere are left
// alone. Namespaces that do not exist are created. By default the
// controllers watch every namespace.
func WithNamespaces(namespaces ...string) Option {
	return func(o *options) { o.namespaces = append(o.namespaces, namespaces...) }
}

// WithPollInterval sets how often the controllers look at a busy Session's
// log without a nudge (`turnlog manager --poll-interval`); the default is
// DefaultPollInterval. Hosts that write through agenthost nudge after every
// turn, so it matters to those that do not.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) { o.pollInterval = d }
}

// WithWorkerMode sets where worker runs go: controllers.WorkerModeLocal
// (the default: inside the test's process) or controllers.WorkerModePod
// (worker pods). envtest runs no Deployment controller and no node, so in
// pod mode the worker Deployment is created and no pod takes the runs:
// Sessions stay WorkPending, which is what a test of a host waiting for
// replay may want. WithWorkerImage sets the pods' image.
func WithWorkerMode(mode string) Option {
	return func(o *options) { o.workerMode = mode }
}

// WithWorkerImage sets the image of worker pods in pod mode.
func WithWorkerImage(image string) Option {
	return func(o *options) { o.workerImage = image }
}

// WithStoreURL makes the controllers use the store at url (s3://, gs://,
// azblob://, file:///dir) instead of a new directory that is removed when
// the Env stops. Credentials come from the environment, as for `turnlog
// manager`. mem:// is refused: an in-process bucket is not shared with the
// host's own OpenStore.
func WithStoreURL(url string) Option {
	return func(o *options) { o.storeURL = url }
}

// WithControlPlane starts kube-apiserver and etcd from dir, whatever
// $KUBEBUILDER_ASSETS says. Without it the binaries are looked for in
// $KUBEBUILDER_ASSETS, then in turnlog's hack/controlplane.sh directory
// ($CONTROL_PLANE_DIR, or $ENVTEST_ROOT/k8s), then in setup-envtest's
// directory: version KubernetesVersion if it is there, the newest
// otherwise.
func WithControlPlane(dir string) Option {
	return func(o *options) { o.controlPlane = dir }
}

// WithLogOutput writes the controllers' logs (JSON, one line each) to w;
// by default they are dropped.
func WithLogOutput(w io.Writer) Option {
	return func(o *options) { o.logOutput = w }
}

// Start runs turnlog for t (see New) and stops it when t and its subtests
// have finished. It fails t if turnlog cannot start.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	// A start that hangs (an API server that never answers) fails the
	// test rather than running into go test's own timeout.
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	env, err := New(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("turnlogtest: stop: %v", err)
		}
	})
	return env
}

// New starts an API server and etcd, installs turnlog's CRDs and admission
// policy, and runs the Session and SessionFork controllers until Stop. ctx
// bounds only the start.
func New(ctx context.Context, opts ...Option) (env *Env, err error) {
	o := options{pollInterval: DefaultPollInterval, workerMode: controllers.WorkerModeLocal, logOutput: io.Discard}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	controlPlane, err := findControlPlane(o.controlPlane)
	if err != nil {
		return nil, err
	}
	st := &starting{o: o, env: &Env{ControlPlane: controlPlane}}
	// Whatever has started is stopped again if a later step fails.
	defer func() {
		if err != nil {
			err = errors.Join(err, st.stop())
		}
	}()
	if err := st.prepare(); err != nil {
		return nil, fmt.Errorf("turnlogtest: %w", err)
	}
	if err := st.startAPIServer(ctx); err != nil {
		return nil, fmt.Errorf("turnlogtest: %w", err)
	}
	if err := st.startManager(ctx); err != nil {
		return nil, fmt.Errorf("turnlogtest: %w", err)
	}
	st.env.stop = st.stop
	return st.env, nil
}

// starting is an Env on its way up, and what stops it.
type starting struct {
	o        options
	env      *Env
	dir      string
	stores   *controllers.BucketCache
	policies []string
	cleanups []func() error
}

// stop stops what has started, last first.
func (st *starting) stop() error {
	var errs []error
	for i := len(st.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, st.cleanups[i]())
	}
	return errors.Join(errs...)
}

// prepare makes the Env's directory: the store (unless one was given) and
// the embedded manifests written out, as envtest and kubeapply read files.
func (st *starting) prepare() error {
	dir, err := os.MkdirTemp("", "turnlogtest-")
	if err != nil {
		return err
	}
	st.dir = dir
	st.cleanups = append(st.cleanups, func() error { return os.RemoveAll(dir) })
	st.env.StoreURL = st.o.storeURL
	if st.env.StoreURL == "" {
		store := filepath.Join(dir, "store")
		if err := os.Mkdir(store, 0o700); err != nil {
			return err
		}
		st.env.StoreURL = "file://" + store
	}
	if st.stores, err = controllers.NewBucketCache([]controllers.StoreConfig{{Name: turnlogv1.DefaultStore, URL: st.env.StoreURL}}, nil); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	st.cleanups = append(st.cleanups, st.stores.Close)
	files, err := fs.Sub(manifests, "manifests")
	if err != nil {
		return err
	}
	if err := os.CopyFS(filepath.Join(dir, "manifests"), files); err != nil {
		return err
	}
	st.policies, err = filepath.Glob(filepath.Join(dir, "manifests", "admission", "*.yaml"))
	return err
}

// startAPIServer starts etcd and kube-apiserver with the CRDs and the
// admission policy, writes the kubeconfig and creates the namespaces.
func (st *starting) startAPIServer(ctx context.Context) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := turnlogv1.AddToScheme(scheme); err != nil {
		return err
	}
	te := &envtest.Environment{
		Scheme:                scheme,
		CRDDirectoryPaths:     []string{filepath.Join(st.dir, "manifests", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	// The paths are set rather than left to envtest, which would prefer
	// $KUBEBUILDER_ASSETS to a directory given with WithControlPlane.
	controlPlane := st.env.ControlPlane
	te.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(controlPlane, "etcd")}
	te.ControlPlane.GetAPIServer().Path = filepath.Join(controlPlane, "kube-apiserver")
	if kubectl := filepath.Join(controlPlane, "kubectl"); fileExists(kubectl) {
		te.ControlPlane.KubectlPath = kubectl
	}
	cfg, err := te.Start()
	if err != nil {
		return fmt.Errorf("start the control plane from %s: %w", controlPlane, err)
	}
	st.cleanups = append(st.cleanups, te.Stop)
	if err := kubeapply.Apply(ctx, cfg, st.policies...); err != nil {
		return fmt.Errorf("install the admission policy: %w", err)
	}
	kubeconfig := filepath.Join(st.dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, te.KubeConfig, 0o600); err != nil {
		return err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	for _, ns := range st.o.namespaces {
		err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	st.env.Client, st.env.Scheme, st.env.Config, st.env.Kubeconfig = kube, scheme, cfg, kubeconfig
	return nil
}

// startManager runs the controllers and waits for their caches.
func (st *starting) startManager(ctx context.Context) error {
	logger := zap.New(zap.WriteTo(st.o.logOutput))
	mgr, err := ctrl.NewManager(st.env.Config, ctrl.Options{
		Scheme:                 st.env.Scheme,
		Logger:                 logger,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controllers.CacheOptions(st.o.namespaces...),
		// Controller names are unique per process unless told otherwise,
		// and a test binary may run several Envs one after the other or
		// at once.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("create the manager: %w", err)
	}
	// Code that logs from a context without a logger of the manager's
	// would otherwise use controller-runtime's global one.
	mctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), logger))
	conf := controllers.Config{Stores: st.stores, WorkerMode: st.o.workerMode, PollInterval: st.o.pollInterval}
	if st.o.workerMode == controllers.WorkerModePod {
		// The manager serves worker pods on a port of this machine's
		// loopback, where nothing dials it unless the test does.
		addr, err := freeLoopbackAddr()
		if err != nil {
			cancel()
			return err
		}
		conf.Pool = controllers.PoolSettings{Image: st.o.workerImage, Listen: addr, Endpoint: "https://" + addr}
	}
	err = controllers.Setup(mctx, mgr, conf)
	if err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	var mgrErr error
	go func() {
		defer close(done)
		mgrErr = mgr.Start(mctx)
	}()
	st.cleanups = append(st.cleanups, func() error {
		cancel()
		<-done
		if mgrErr != nil {
			return fmt.Errorf("manager: %w", mgrErr)
		}
		return nil
	})
	// The caches hold what the controllers read: once they are synced, a
	// manager that could not start has said so.
	syncCtx, cancelSync := context.WithCancel(ctx)
	go func() {
		select {
		case <-done:
			cancelSync()
		case <-syncCtx.Done():
		}
	}()
	synced := mgr.GetCache().WaitForCacheSync(syncCtx)
	cancelSync()
	if !synced {
		select {
		case <-done:
			return fmt.Errorf("the manager stopped: %v", mgrErr)
		default:
			return fmt.Errorf("the manager's caches did not sync: %w", ctx.Err())
		}
	}
	return nil
}

// freeLoopbackAddr is an address on 127.0.0.1 with a port free now.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Stop stops the controllers, the API server and etcd, and removes the
// Env's files (the default store among them). It returns the first
// call's result every time.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() { e.stopErr = e.stop() })
	return e.stopErr
}

func (o *options) check() error {
	if o.pollInterval <= 0 {
		return fmt.Errorf("turnlogtest: poll interval must be positive, got %s", o.pollInterval)
	}
	switch o.workerMode {
	case controllers.WorkerModeLocal:
	case controllers.WorkerModePod:
		if o.workerImage == "" {
			// No pod runs on envtest; the Deployment needs an image all
			// the same.
			o.workerImage = "ghcr.io/turnlog/turnlog:turnlogtest"
		}
	default:
		return fmt.Errorf("turnlogtest: unknown worker mode %q (want %s or %s)", o.workerMode, controllers.WorkerModeLocal, controllers.WorkerModePod)
	}
	for _, ns := range o.namespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("turnlogtest: namespace %q: %s", ns, errs[0])
		}
	}
	if strings.HasPrefix(o.storeURL, "mem://") {
		return fmt.Errorf("turnlogtest: store %s: a mem:// bucket lives in the process that opens it, so a host could not read what the controllers write; use file:///dir", o.storeURL)
	}
	return nil
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}
