// Package controlplane starts kube-apiserver and etcd (envtest) with
// turnlog's CRDs for one test, with a client and a kubeconfig file for the
// processes the test runs (the CLI, pi, a manager). The binaries are the
// ones `make control-plane` builds. A test that wants the controllers
// running too uses turnlogtest with WithControlPlane(Assets()): this
// package, under internal/, imports nothing of the packages above it.
package controlplane

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
)

// ControlPlane is a running kube-apiserver and etcd, stopped when the test
// ends.
type ControlPlane struct {
	Config *rest.Config
	// Client knows client-go's kinds and turnlog's.
	Client client.Client
	// Kubeconfig is a kubeconfig file for a user in system:masters.
	Kubeconfig string
}

// Options tune a control plane; the zero value is what most tests want.
type Options struct {
	// User names the kubeconfig's user ("admin" if empty).
	User string
	// QPS and Burst, if set, replace client-go's limits on Config.
	QPS   float32
	Burst int
}

// Assets is the directory of the control plane's binaries:
// $KUBEBUILDER_ASSETS, else where `make control-plane` installs them.
func Assets() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "kubebuilder-envtest", "k8s", "1.37.2-linux-amd64")
}

// Available reports whether the binaries are there.
func Available() bool {
	_, err := os.Stat(filepath.Join(Assets(), "kube-apiserver"))
	return err == nil
}

// SkipIfMissing skips tb when the binaries are not there, except under
// CI=true, where a test goes on to fail for the want of them.
func SkipIfMissing(tb testing.TB) {
	tb.Helper()
	if !Available() && os.Getenv("CI") != "true" {
		tb.Skipf("no control plane in %s: run `make control-plane`", Assets())
	}
}

// Start starts a control plane with the CRDs of root's config/crd/bases
// (root: the repository, relative to the test's directory).
func Start(t testing.TB, root string, opts Options) *ControlPlane {
	t.Helper()
	if !Available() {
		t.Fatalf("no control plane in %s: run `make control-plane`", Assets())
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: Assets(),
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the control plane from %s: %v", Assets(), err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if opts.QPS > 0 {
		cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(turnlogv1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	name := opts.User
	if name == "" {
		name = "admin"
	}
	user, err := env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return &ControlPlane{Config: cfg, Client: c, Kubeconfig: path}
}
