// Package localcluster runs a small but real Kubernetes cluster on this
// machine: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// as processes, and one node of one of two kinds.
//
// The container node (ContainerNode) is a real one: a kubelet, containerd
// with runc, and the CNI bridge plugin on a network the cluster creates for
// itself; images are OCI archives imported at start (Options.ImageArchives),
// since there is no registry. It needs root and `make node-deps`.
//
// The process node (ProcessNode, the default) is a virtual-kubelet provider
// standing in for a kubelet and a container runtime: a pod scheduled to it
// runs its single container's command as a process, with the container
// image mapped to a local binary (Options.Images). Everything around it is
// the real Kubernetes machinery: the Job controller creates the pods, the
// scheduler binds them, and the node reports Running, Succeeded or Failed,
// exit codes and termination messages through the API, so `kubectl get
// pods` shows what it would on a real cluster. docs/local-cluster.md lists
// what each node honours.
package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/turnlog/turnlog/internal/kubeapply"
)

// DefaultNodeName is the name of the local node unless Options.NodeName
// says otherwise.
const DefaultNodeName = "turnlog-local"

// NodeKind says what runs the cluster's pods.
type NodeKind string

const (
	// ProcessNode runs each pod's container as a local process.
	ProcessNode NodeKind = "process"
	// ContainerNode runs pods as containers: kubelet, containerd, runc.
	ContainerNode NodeKind = "container"
)

// containerNodeControllers are what a deployed manager needs besides: for
// its service-account token, a default ServiceAccount and the
// kube-root-ca.crt ConfigMap in every namespace.
var containerNodeControllers = []string{
	"serviceaccount-controller",
	"root-ca-certificate-publisher-controller",
}

// controllers are the kube-controller-manager controllers the cluster runs:
// Jobs and their pods, Deployments and their ReplicaSets' pods (worker
// pods, a deployed manager), cleanup of finished Jobs,
// owner-reference garbage collection, terminated-pod cleanup, and
// namespace deletion.
var controllers = []string{
	"job-controller",
	"deployment-controller",
	"replicaset-controller",
	"ttl-after-finished-controller",
	"garbage-collector-controller",
	"pod-garbage-collector-controller",
	"namespace-controller",
}

// Options configure a local cluster.
type Options struct {
	// BinaryDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler and kubectl (`make control-plane`). Empty means
	// $KUBEBUILDER_ASSETS, else
	// ~/.local/share/kubebuilder-envtest/k8s/1.37.2-linux-amd64.
	BinaryDir string
	// StateDir keeps etcd's data, the kubeconfig, component logs and pod
	// sandboxes, so a cluster started again on it has the same objects.
	// Empty means a temporary directory that Stop removes.
	StateDir string
	// CRDDirectoryPaths are CRD manifests (files or directories) installed
	// before Start returns.
	CRDDirectoryPaths []string
	// ManifestPaths are YAML files of further objects (such as the
	// admission policy of config/admission) created after the CRDs.
	ManifestPaths []string
	// Node is ProcessNode (the default) or ContainerNode.
	Node NodeKind
	// Images (process node) maps container images to local binaries. A
	// pod's image matches a key exactly or, failing that, by its name
	// without tag or digest.
	Images map[string]string
	// ImageArchives (container node) are OCI image archives (package
	// ociimage) imported into containerd before Start returns.
	ImageArchives []string
	// NodeName defaults to DefaultNodeName.
	NodeName string
	// Capacity is what the process node advertises to the scheduler; by
	// default 8 CPUs, 16Gi of memory and 110 pods. A kubelet reports the
	// machine's.
	Capacity corev1.ResourceList
}

// Cluster is a running local cluster.
type Cluster struct {
	// Dir holds the kubeconfig, logs/ (one file per component) and pods/
	// (one sandbox per pod: working directory, container.log and
	// termination-log).
	Dir string
	// Kubeconfig is a kubeconfig file of a cluster admin.
	Kubeconfig string
	// RESTConfig is the same admin's client configuration.
	RESTConfig *rest.Config
	// KubectlPath is the kubectl binary of BinaryDir.
	KubectlPath string
	// NodeName is the name of the node.
	NodeName string
	// NodeIP is the node's address: 127.0.0.1 for the process node; for the
	// container node, this host's address on the pod network, where the API
	// server listens and where pods reach servers the caller starts.
	NodeIP string

	env        *envtest.Environment
	components []*component
	provider   *processProvider
	cnode      *containerNode
	stopNode   context.CancelFunc
	node       *nodeutil.Node
	removeDir  bool
	// logFiles receive etcd's and kube-apiserver's output.
	logFiles     []*os.File
	apiserverLog *os.File
	// apiserver and etcd are what RestartAPIServer and LoseControlPlane
	// started again, if anything.
	apiserver, etcd *restartedProcess
	etcdLog         *os.File
	// binDir, crdPaths and manifestPaths are what Start was given, for a
	// control plane started again.
	binDir                  string
	crdPaths, manifestPaths []string
}

// Start starts a local cluster and returns once the node is Ready and pods
// can be scheduled to it. ctx bounds the start only. On error, whatever was
// started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	binDir, err := binaryDir(opts.BinaryDir)
	if err != nil {
		return nil, err
	}
	images, err := resolveBinaries(opts.Images)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Dir: opts.StateDir, KubectlPath: filepath.Join(binDir, "kubectl"), NodeName: opts.NodeName,
		binDir: binDir, crdPaths: opts.CRDDirectoryPaths, manifestPaths: opts.ManifestPaths,
	}
	if c.NodeName == "" {
		c.NodeName = DefaultNodeName
	}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "localcluster-"); err != nil {
			return nil, fmt.Errorf("creating the cluster directory: %w", err)
		}
		c.removeDir = true
	} else if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.Stop() // err says what went wrong
		}
	}()
	for _, d := range []string{"etcd", "logs", "pods"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("creating the cluster directory: %w", err)
		}
	}
	c.NodeIP = localIP
	switch opts.Node {
	case "", ProcessNode:
	case ContainerNode:
		if c.cnode, err = prepareContainerNode(filepath.Join(c.Dir, "node"), binDir); err != nil {
			return nil, err
		}
		c.NodeIP = c.cnode.gateway.String()
	default:
		return nil, fmt.Errorf("Options.Node %q: want %q or %q", opts.Node, ProcessNode, ContainerNode)
	}

	if err := c.startControlPlane(binDir, opts.CRDDirectoryPaths); err != nil {
		return nil, err
	}
	if err := kubeapply.Apply(ctx, c.RESTConfig, opts.ManifestPaths...); err != nil {
		return nil, fmt.Errorf("installing manifests: %w", err)
	}
	if err := c.startControllers(ctx, binDir); err != nil {
		return nil, err
	}
	if c.cnode != nil {
		err = c.startContainerNode(ctx, opts.ImageArchives)
	} else {
		err = c.startNode(ctx, opts, images)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// startControlPlane starts etcd and kube-apiserver through envtest, which
// generates their certificates, and writes an admin kubeconfig.
func (c *Cluster) startControlPlane(binDir string, crds []string) error {
	c.env = &envtest.Environment{
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
	}
	etcdLog, err := c.createLog("etcd")
	if err != nil {
		return err
	}
	c.etcdLog = etcdLog
	apiserverLog, err := c.createLog("kube-apiserver")
	if err != nil {
		return err
	}
	c.apiserverLog = apiserverLog
	c.env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(c.Dir, "etcd"), Out: etcdLog, Err: etcdLog}
	c.env.ControlPlane.APIServer = &envtest.APIServer{Out: apiserverLog, Err: apiserverLog}
	if c.cnode != nil {
		c.configureForPods(c.env.ControlPlane.APIServer)
	}
	if _, err := c.env.Start(); err != nil {
		c.env = nil
		return fmt.Errorf("starting etcd and kube-apiserver (logs in %s): %w", filepath.Join(c.Dir, "logs"), err)
	}
	admin, err := c.env.AddUser(envtest.User{Name: "localcluster-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("creating the cluster admin: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("creating the admin kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	c.RESTConfig = admin.Config()
	if c.cnode != nil {
		c.cnode.apiserverCA = filepath.Join(c.cnode.dir, "apiserver-ca.crt")
		if err := os.WriteFile(c.cnode.apiserverCA, c.env.ControlPlane.APIServer.SecureServing.CA, 0o644); err != nil {
			return fmt.Errorf("writing the API server's CA: %w", err)
		}
	}
	return nil
}

// createLog creates logs/<name>.log, closed by Stop.
func (c *Cluster) createLog(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(c.Dir, "logs", name+".log"))
	if err != nil {
		return nil, fmt.Errorf("creating the %s log: %w", name, err)
	}
	c.logFiles = append(c.logFiles, f)
	return f, nil
}

// install installs the CRDs and manifests Start was given into a control
// plane started again on empty etcd.
func (c *Cluster) install(ctx context.Context) error {
	if _, err := envtest.InstallCRDs(c.RESTConfig, envtest.CRDInstallOptions{Paths: c.crdPaths, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	if err := kubeapply.Apply(ctx, c.RESTConfig, c.manifestPaths...); err != nil {
		return fmt.Errorf("installing manifests: %w", err)
	}
	return nil
}

// startControllers starts kube-controller-manager and kube-scheduler as
// processes with the admin kubeconfig and waits until both are healthy.
// Neither elects a leader: each is the only one of its kind.
func (c *Cluster) startControllers(ctx context.Context, binDir string) error {
	for _, s := range []struct {
		name, healthPath string
		args             []string
	}{
		{"kube-controller-manager", "/healthz", c.controllerManagerArgs()},
		{"kube-scheduler", "/readyz", nil},
	} {
		port, err := freePort()
		if err != nil {
			return err
		}
		certDir := filepath.Join(c.Dir, "logs", s.name+"-certs")
		args := append([]string{
			"--kubeconfig=" + c.Kubeconfig,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + certDir,
		}, s.args...)
		comp, err := startComponent(s.name, filepath.Join(binDir, s.name), filepath.Join(c.Dir, "logs", s.name+".log"), args)
		if err != nil {
			return err
		}
		c.components = append(c.components, comp)
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err = comp.waitHealthy(waitCtx, fmt.Sprintf("https://127.0.0.1:%d%s", port, s.healthPath))
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// startNode registers the process-backed node, waits until it is Ready and
// makes it schedulable.
func (c *Cluster) startNode(ctx context.Context, opts Options, images map[string]string) error {
	clientset, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	tlsConfig, err := selfSignedTLS(c.NodeName)
	if err != nil {
		return err
	}
	capacity := opts.Capacity
	if capacity == nil {
		capacity = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
	}
	podsDir := filepath.Join(c.Dir, "pods")
	newProvider := func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		c.provider = newProcessProvider(podsDir, images, pc.Pods, clientset.CoreV1())
		return c.provider, nil, nil
	}
	mux := http.NewServeMux()
	n, err := nodeutil.NewNode(c.NodeName, newProvider,
		nodeutil.WithClient(clientset),
		nodeutil.AttachProviderRoutes(mux),
		func(cfg *nodeutil.NodeConfig) error {
			// The kubelet API serves `kubectl logs`. The API server does not
			// verify a kubelet's certificate unless given a CA for it
			// (envtest gives none); the listener is on loopback only.
			cfg.HTTPListenAddr = net.JoinHostPort(localIP, strconv.Itoa(port))
			cfg.Handler = mux
			cfg.TLSConfig = tlsConfig
			cfg.NumWorkers = 2
			spec := &cfg.NodeSpec
			spec.Labels[corev1.LabelOSStable] = runtime.GOOS
			spec.Labels[corev1.LabelArchStable] = runtime.GOARCH
			spec.Status.Capacity = capacity
			spec.Status.Allocatable = capacity
			spec.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: localIP}}
			spec.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
			spec.Status.NodeInfo.OperatingSystem = runtime.GOOS
			spec.Status.NodeInfo.Architecture = runtime.GOARCH
			return nil
		})
	if err != nil {
		return fmt.Errorf("creating the local node: %w", err)
	}
	c.node = n
	nodeCtx, stop := context.WithCancel(context.Background())
	c.stopNode = stop
	go func() { _ = n.Run(nodeCtx) }()
	if err := n.WaitReady(ctx, time.Minute); err != nil {
		return fmt.Errorf("waiting for node %s to be Ready: %w", c.NodeName, err)
	}
	return c.untaintNode(ctx, clientset)
}

// untaintNode removes the not-ready taint the API server puts on every new
// node. kube-controller-manager's node lifecycle controller would remove it
// once the node is Ready; the cluster does not run that controller, since
// its other duty (evicting pods from unresponsive nodes) has no use on a
// node that lives in this process.
func (c *Cluster) untaintNode(ctx context.Context, clientset kubernetes.Interface) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := clientset.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := n.Spec.Taints[:0]
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				taints = append(taints, t)
			}
		}
		if len(taints) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = taints
		_, err = clientset.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("making node %s schedulable: %w", c.NodeName, err)
	}
	return nil
}

// InstallCRDs installs the CRDs of the given manifest files or directories
// and waits until they are served.
func (c *Cluster) InstallCRDs(paths ...string) error {
	if _, err := envtest.InstallCRDs(c.RESTConfig, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("installing CRDs from %s: %w", strings.Join(paths, ", "), err)
	}
	return nil
}

// Kubectl returns a kubectl command against the cluster.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.KubectlPath, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
}

// Stop stops the node and kills every pod process, then stops the
// controllers, kube-apiserver and etcd. A temporary cluster directory is
// removed; a StateDir is kept. Stop is safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	if c.stopNode != nil {
		c.stopNode()
		<-c.node.Done()
		c.stopNode = nil
	}
	if c.provider != nil {
		c.provider.shutdown()
	}
	if c.cnode != nil {
		c.cnode.stop()
	}
	for i := len(c.components) - 1; i >= 0; i-- {
		c.components[i].stop()
	}
	c.components = nil
	c.stopRestarted()
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
		}
		c.env = nil
	}
	if c.cnode != nil {
		c.cnode.deleteNetwork()
		c.cnode = nil
	}
	for _, f := range c.logFiles {
		_ = f.Close()
	}
	c.logFiles = nil
	if c.removeDir {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.Dir, err))
		}
		c.removeDir = false
	}
	return errors.Join(errs...)
}

// binaryDir finds the control-plane binaries.
func binaryDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the control-plane binaries: %w", err)
		}
		dir = filepath.Join(home, ".local/share/kubebuilder-envtest/k8s/1.37.2-linux-amd64")
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("no %s in %s: run `make control-plane` or set Options.BinaryDir", b, dir)
		}
	}
	return dir, nil
}

// resolveBinaries resolves the binaries images are mapped to (a name
// without a slash is looked up in PATH), failing early on one that cannot
// run.
func resolveBinaries(images map[string]string) (map[string]string, error) {
	resolved := make(map[string]string, len(images))
	for image, binary := range images {
		path, err := exec.LookPath(binary)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w", image, err)
		}
		if path, err = filepath.Abs(path); err != nil {
			return nil, fmt.Errorf("image %q: %w", image, err)
		}
		resolved[image] = path
	}
	return resolved, nil
}

// selfSignedTLS is the kubelet API's serving configuration.
func selfSignedTLS(host string) (*tls.Config, error) {
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, []net.IP{net.ParseIP(localIP)}, nil)
	if err != nil {
		return nil, fmt.Errorf("generating the node's serving certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the node's serving certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}
