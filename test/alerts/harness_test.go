package alerts

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	turnlogv1 "github.com/turnlog/turnlog/api/v1alpha1"
	"github.com/turnlog/turnlog/internal/kubeapply"
	"github.com/turnlog/turnlog/internal/testutil/controlplane"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// controlPlaneAssets is where kube-apiserver and etcd are
// (controlplane.Assets). This package imports nothing that pulls in
// turnlog's controllers: this test binary also runs a controller-runtime
// manager of its own, the panicking one, and its metrics must be
// controller-runtime's alone, not turnlog's registered beside them.
func controlPlaneAssets(t *testing.T) string {
	t.Helper()
	if !controlplane.Available() {
		t.Fatalf("no control plane in %s: run `make control-plane`, or set KUBEBUILDER_ASSETS", controlplane.Assets())
	}
	return controlplane.Assets()
}

// cluster is the control plane with turnlog's CRDs, admission policy and
// metrics RBAC installed.
type cluster struct {
	client client.Client
	kube   kubernetes.Interface
	// kubeconfig is an admin's, for the manager, the panicking controller
	// and the CLI.
	kubeconfig string
}

// startCluster starts kube-apiserver and etcd with config/crd, and applies
// config/admission and the metrics roles of config/rbac as the other
// envtest suites do (kubeapply, without kustomize).
func startCluster(t *testing.T, dir string) *cluster {
	t.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: controlPlaneAssets(t),
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
	})
	manifests := []string{
		filepath.Join(repoRoot, "config", "admission", "forkedfrom_policy.yaml"),
		filepath.Join(repoRoot, "config", "rbac", "metrics_auth_role.yaml"),
	}
	if err := kubeapply.Apply(t.Context(), cfg, manifests...); err != nil {
		t.Fatalf("install turnlog's admission policy and metrics roles: %v", err)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(turnlogv1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return &cluster{client: c, kube: kube, kubeconfig: kubeconfig}
}

func (c *cluster) createNamespaces(t *testing.T, names ...string) {
	t.Helper()
	for _, ns := range names {
		if err := c.client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
}

// scraperToken makes the ServiceAccount Prometheus scrapes as, binds it to
// turnlog-metrics-reader as docs/observability.md says (`kubectl create
// clusterrolebinding prometheus-turnlog-metrics ...`), and writes a token
// of it from the TokenRequest API (what `kubectl create token` asks for)
// into a file for Prometheus' credentials_file.
func (c *cluster) scraperToken(t *testing.T, namespace, name, file string) {
	t.Helper()
	ctx := t.Context()
	c.createNamespaces(t, namespace)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.client.Create(ctx, sa); err != nil {
		t.Fatalf("create ServiceAccount %s/%s: %v", namespace, name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-turnlog-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "turnlog-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	if err := c.client.Create(ctx, binding); err != nil {
		t.Fatalf("bind turnlog-metrics-reader: %v", err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](2 * 3600)}}
	token, err := c.kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request a token of ServiceAccount %s/%s: %v", namespace, name, err)
	}
	if err := os.WriteFile(file, []byte(token.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freeAddr is 127.0.0.1 with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// process is a program the test runs, its output in a file; it is stopped
// when the test ends.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProcess(t *testing.T, name, log string, env []string, bin string, args ...string) *process {
	t.Helper()
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop stops the process as the kubelet would: SIGTERM, then SIGKILL.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// failIfExited fails the test with the end of the process's output if it
// has exited: whatever the test waits for will not come.
func (p *process) failIfExited(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s exited (%v); the end of its output:\n%s", p.name, p.cmd.ProcessState, p.tail())
	}
}

// tail is the last lines the process wrote.
func (p *process) tail() string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(string(bytes.TrimSpace(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// buildTurnlog builds ./cmd/turnlog into dir, the binary the manager and
// the CLI run from.
func buildTurnlog(dir string) (string, error) {
	bin := filepath.Join(dir, "turnlog")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/turnlog")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/turnlog: %v\n%s", err, out)
	}
	return bin, nil
}

// eventually calls check every second until it reports done, and fails
// the test after within with what it last said.
func eventually(t *testing.T, within time.Duration, what string, check func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, state := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s; %s", what, within, state)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(time.Second):
		}
	}
}

// runCLI runs the turnlog CLI and fails the test with its output if it
// fails.
func runCLI(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("turnlog %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}
