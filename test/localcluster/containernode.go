package localcluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/turnlog/turnlog/test/localcluster/ociimage"
)

// PauseImage is the sandbox image the container node builds (from
// ./pause) and imports at start, so no registry is needed.
const PauseImage = "localcluster.local/pause:1"

// cniPluginDirs are where Debian's containernetworking-plugins and the
// upstream tarball install the CNI plugins.
var cniPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// containerNode is the real node: containerd with runc, the CNI bridge
// plugin on a bridge of the cluster's own, and a kubelet.
type containerNode struct {
	dir string // <cluster dir>/node
	// id names the bridge and the cgroups, so that clusters started at the
	// same time on one machine do not meet.
	id         string
	bridge     string
	subnet     *net.IPNet
	gateway    net.IP
	cgroupRoot string // the kubelet's cgroupRoot, e.g. /localcluster-1a2b3c4d
	cniBinDir  string
	// apiserverCA is the API server's CA, for kube-root-ca.crt.
	apiserverCA string

	containerd *component
	kubelet    *component
}

// prepareContainerNode checks what the real node needs, then creates its
// network and cgroups: both come before the API server, which listens on
// the bridge so that pods reach it.
func prepareContainerNode(dir, binDir string) (*containerNode, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the container node needs root (containerd, runc, cgroups and a network bridge)")
	}
	var missing []string
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if _, err := os.Stat(filepath.Join(binDir, "kubelet")); err != nil {
		missing = append(missing, filepath.Join(binDir, "kubelet")+" (make control-plane)")
	}
	n := &containerNode{dir: dir}
	for _, d := range cniPluginDirs {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
			n.cniBinDir = d
			break
		}
	}
	if n.cniBinDir == "" {
		missing = append(missing, "CNI plugins (bridge, host-local, loopback in "+strings.Join(cniPluginDirs, " or ")+")")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the container node needs %s: run `make node-deps` (hack/node-deps.sh)", strings.Join(missing, ", "))
	}
	idBytes := make([]byte, 4)
	_, _ = rand.Read(idBytes)
	n.id = hex.EncodeToString(idBytes)
	n.bridge = "lc" + n.id
	n.cgroupRoot = "/localcluster-" + n.id
	for _, d := range []string{"containerd", "cni", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := n.createNetwork(); err != nil {
		return nil, err
	}
	if err := n.createCgroups(); err != nil {
		n.teardown()
		return nil, err
	}
	return n, nil
}

// createNetwork picks a free 10.244.N.0/24 and creates the bridge with its
// gateway address, which is the node's address and the host's address on
// the pod network.
func (n *containerNode) createNetwork() error {
	used, err := hostNetworks()
	if err != nil {
		return err
	}
	var subnet *net.IPNet
	for range 64 {
		b := make([]byte, 1)
		_, _ = rand.Read(b)
		_, candidate, _ := net.ParseCIDR(fmt.Sprintf("10.244.%d.0/24", b[0]))
		if !slices.ContainsFunc(used, func(u *net.IPNet) bool { return u.Contains(candidate.IP) || candidate.Contains(u.IP) }) {
			subnet = candidate
			break
		}
	}
	if subnet == nil {
		return errors.New("no free 10.244.N.0/24 for the pod network")
	}
	n.subnet = subnet
	n.gateway = make(net.IP, 4)
	binary.BigEndian.PutUint32(n.gateway, binary.BigEndian.Uint32(subnet.IP.To4())+1)
	for _, args := range [][]string{
		{"link", "add", "name", n.bridge, "type", "bridge"},
		{"addr", "add", n.gateway.String() + "/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			n.deleteNetwork()
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// hostNetworks are the networks of this host's interfaces.
func hostNetworks() ([]*net.IPNet, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var nets []*net.IPNet
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			nets = append(nets, ipn)
		}
	}
	return nets, nil
}

func (n *containerNode) deleteNetwork() {
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
}

// cgroupHierarchies are the mounted cgroup v1 hierarchies (and the cgroup2
// one of a hybrid host), by mount point.
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dirs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if fstype := fields[sep+1]; (fstype == "cgroup" || fstype == "cgroup2") && strings.HasPrefix(fields[4], "/sys/fs/cgroup") {
			dirs = append(dirs, fields[4])
		}
	}
	return dirs, s.Err()
}

// createCgroups creates the kubelet's cgroupRoot in every hierarchy, and
// below it "runtime", which containerd and its shims join. Stop then finds
// every process of the node, containers included, in one tree.
func (n *containerNode) createCgroups() error {
	dirs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range dirs {
		for _, sub := range []string{"", "runtime"} {
			d := filepath.Join(h, n.cgroupRoot, sub)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("creating cgroup %s: %w", d, err)
			}
			// A new cpuset cgroup has no CPUs or memory nodes until given
			// its parent's.
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				parent, err := os.ReadFile(filepath.Join(filepath.Dir(d), file))
				if err != nil {
					continue
				}
				if err := os.WriteFile(filepath.Join(d, file), parent, 0o644); err != nil {
					return fmt.Errorf("setting %s of %s: %w", file, d, err)
				}
			}
		}
	}
	return nil
}

// joinRuntimeCgroup moves pid into the runtime cgroup of every hierarchy.
func (n *containerNode) joinRuntimeCgroup(pid int) error {
	dirs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range dirs {
		procs := filepath.Join(h, n.cgroupRoot, "runtime", "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving containerd into %s: %w", procs, err)
		}
	}
	return nil
}

// startContainerd writes containerd's configuration, starts it in the
// runtime cgroup and imports the pause image and the given archives.
func (n *containerNode) startContainerd(ctx context.Context, archives []string) error {
	cdir := filepath.Join(n.dir, "containerd")
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %[3]q

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
`, filepath.Join(cdir, "root"), filepath.Join(cdir, "state"), n.containerdSocket(), filepath.Join(cdir, "opt"),
		PauseImage, filepath.Join(cdir, "runc"), n.cniBinDir, filepath.Join(n.dir, "cni"))
	configPath := filepath.Join(cdir, "config.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		return err
	}
	if err := n.writeCNIConfig(); err != nil {
		return err
	}
	comp, err := startComponent("containerd", "containerd", filepath.Join(n.dir, "..", "logs", "containerd.log"),
		[]string{"--config", configPath})
	if err != nil {
		return err
	}
	n.containerd = comp
	if err := n.joinRuntimeCgroup(comp.cmd.Process.Pid); err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := n.waitContainerd(waitCtx); err != nil {
		return err
	}
	pause, err := n.buildPauseImage(ctx)
	if err != nil {
		return err
	}
	for _, a := range append([]string{pause}, archives...) {
		if out, err := n.ctr(ctx, "images", "import", a); err != nil {
			return fmt.Errorf("importing image archive %s: %w: %s", a, err, out)
		}
	}
	return nil
}

func (n *containerNode) containerdSocket() string {
	return filepath.Join(n.dir, "containerd", "containerd.sock")
}

// ctr runs ctr against the node's containerd, in the namespace the CRI
// plugin (and so the kubelet) uses.
func (n *containerNode) ctr(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (n *containerNode) waitContainerd(ctx context.Context) error {
	for {
		if _, err := n.ctr(ctx, "version"); err == nil {
			return nil
		}
		select {
		case <-n.containerd.exited:
			return fmt.Errorf("containerd exited (%v); see %s", n.containerd.err, n.containerd.logPath)
		case <-ctx.Done():
			return fmt.Errorf("containerd not answering on %s: %w; see %s", n.containerdSocket(), ctx.Err(), n.containerd.logPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// buildPauseImage builds the sandbox image from ./pause, a static binary.
func (n *containerNode) buildPauseImage(ctx context.Context) (string, error) {
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(n.dir, "pause")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./pause")
	build.Dir = filepath.Dir(self)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the pause binary: %w: %s", err, out)
	}
	archive := filepath.Join(n.dir, "pause.tar")
	err := ociimage.Write(archive, ociimage.Image{
		Ref:        PauseImage,
		Files:      []ociimage.File{{Path: "/pause", Mode: 0o755, Source: bin}},
		User:       "65535:65535",
		Entrypoint: []string{"/pause"},
	})
	return archive, err
}

// writeCNIConfig configures the bridge plugin on the node's bridge, with
// host-local addresses from the subnet; containerd adds the loopback
// plugin itself. Addresses below .16 are left out, for the Service range.
func (n *containerNode) writeCNIConfig() error {
	base := binary.BigEndian.Uint32(n.subnet.IP.To4())
	first := make(net.IP, 4)
	binary.BigEndian.PutUint32(first, base+16)
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "localcluster",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q, "rangeStart": %q, "gateway": %q}]],
      "dataDir": %q
    }
  }]
}
`, n.bridge, n.subnet.String(), first.String(), n.gateway.String(), filepath.Join(n.dir, "cni", "ipam"))
	return os.WriteFile(filepath.Join(n.dir, "cni", "10-localcluster.conflist"), []byte(conf), 0o600)
}

// startKubelet starts the kubelet against containerd and the API server.
func (n *containerNode) startKubelet(binDir, kubeconfig, nodeName string) (healthz string, err error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	healthPort, err := freePort()
	if err != nil {
		return "", err
	}
	kdir := filepath.Join(n.dir, "kubelet")
	// cgroup v1: this kubelet refuses it unless failCgroupV1 is false.
	// oomScoreAdj 0, and containerd's restrict_oom_score_adj: a kubelet
	// gives itself -999 and sandboxes -998, but lowering oom_score_adj
	// needs CAP_SYS_RESOURCE, which some machines (VMs for CI among them)
	// withhold even from root; runc then fails every sandbox with
	// "failed to update /proc/self/oom_score_adj: Permission denied".
	// Kernel tunables: the kubelet sets vm.overcommit_memory and the
	// kernel.panic ones as on every node (protectKernelDefaults: false).
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
containerRuntimeEndpoint: unix://%[2]s
imageServiceEndpoint: unix://%[2]s
address: %[3]s
port: %[4]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[5]d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
podLogsDir: %[6]s
oomScoreAdj: 0
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1%%"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
serializeImagePulls: false
`, n.cgroupRoot, n.containerdSocket(), n.gateway, port, healthPort, filepath.Join(n.dir, "pod-logs"))
	configPath := filepath.Join(kdir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		return "", err
	}
	comp, err := startComponent("kubelet", filepath.Join(binDir, "kubelet"), filepath.Join(n.dir, "..", "logs", "kubelet.log"), []string{
		"--config=" + configPath,
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + nodeName,
		"--node-ip=" + n.gateway.String(),
		"--root-dir=" + filepath.Join(kdir, "root"),
		"--cert-dir=" + filepath.Join(kdir, "pki"),
		"--v=2",
	})
	if err != nil {
		return "", err
	}
	n.kubelet = comp
	return fmt.Sprintf("http://127.0.0.1:%d/healthz", healthPort), nil
}

// stop stops the kubelet and containerd, kills every process left in the
// node's cgroups (containers and shims), unmounts what they mounted under
// the node's directory and removes the cgroups. The bridge stays until
// deleteNetwork: the API server listens on it until it has stopped.
func (n *containerNode) stop() {
	if n.kubelet != nil {
		n.kubelet.stop()
		n.kubelet = nil
	}
	if n.containerd != nil {
		n.containerd.stop()
		n.containerd = nil
	}
	n.killCgroupProcesses()
	unmountUnder(n.dir)
	n.removeCgroups()
}

// teardown undoes prepareContainerNode.
func (n *containerNode) teardown() {
	n.stop()
	n.deleteNetwork()
}

// killCgroupProcesses SIGKILLs every process in the node's cgroup tree
// until none is left (a process may fork while it is being killed).
func (n *containerNode) killCgroupProcesses() {
	dirs, err := cgroupHierarchies()
	if err != nil || len(dirs) == 0 {
		return
	}
	// Any one hierarchy holds every process; pids is v1's lightest.
	h := dirs[0]
	for _, d := range dirs {
		if strings.HasSuffix(d, "/pids") {
			h = d
		}
	}
	root := filepath.Join(h, n.cgroupRoot)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pids := cgroupProcesses(root)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func cgroupProcesses(root string) []int {
	var pids []int
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroups removes the node's cgroups, deepest first.
func (n *containerNode) removeCgroups() {
	dirs, err := cgroupHierarchies()
	if err != nil {
		return
	}
	for _, h := range dirs {
		var cgroups []string
		_ = filepath.WalkDir(filepath.Join(h, n.cgroupRoot), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				cgroups = append(cgroups, path)
			}
			return nil
		})
		for i := len(cgroups) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(cgroups[i])
		}
	}
}

// unmountUnder detaches every mount below dir (container root filesystems,
// sandbox /dev/shm, network namespaces, pod volumes), deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// configureForPods makes the API server reachable from pods as a real
// cluster's is: it listens on the node's bridge address, port 443, and the
// Service range starts at that address, so the `kubernetes` Service's
// ClusterIP (the first of the range) is the API server itself and in-cluster
// clients reach it without a kube-proxy. Its serving certificate names that
// address. Service-account tokens are admitted, for pods that mount one.
func (c *Cluster) configureForPods(apiserver *envtest.APIServer) {
	gw := c.cnode.gateway.String()
	apiserver.SecureServing.ListenAddr = envtest.ListenAddr{Address: gw, Port: "443"}
	args := apiserver.Configure()
	args.Disable("disable-admission-plugins")
	args.Set("service-cluster-ip-range", c.cnode.subnet.IP.String()+"/28")
	args.Set("advertise-address", gw)
	// The node's name does not resolve; its address does.
	args.Set("kubelet-preferred-address-types", "InternalIP")
}

// controllerManagerArgs selects the controllers; the container node's pods
// also need service-account ones, which publish the API server's CA.
func (c *Cluster) controllerManagerArgs() []string {
	if c.cnode == nil {
		return []string{"--controllers=" + strings.Join(controllers, ",")}
	}
	return []string{
		"--controllers=" + strings.Join(append(slices.Clone(controllers), containerNodeControllers...), ","),
		"--root-ca-file=" + c.cnode.apiserverCA,
	}
}

// startContainerNode starts containerd and the kubelet, and returns once
// the node is Ready and schedulable.
func (c *Cluster) startContainerNode(ctx context.Context, archives []string) error {
	if err := c.cnode.startContainerd(ctx, archives); err != nil {
		return err
	}
	return c.startKubelet(ctx)
}

// startKubelet starts the container node's kubelet, waits until it has
// registered the node Ready, and makes the node schedulable.
func (c *Cluster) startKubelet(ctx context.Context) error {
	n := c.cnode
	healthz, err := n.startKubelet(c.binDir, c.Kubeconfig, c.NodeName)
	if err != nil {
		return err
	}
	clientset, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := n.kubelet.waitHealthy(waitCtx, healthz); err != nil {
		return err
	}
	for {
		node, err := clientset.CoreV1().Nodes().Get(waitCtx, c.NodeName, metav1.GetOptions{})
		if err == nil && slices.ContainsFunc(node.Status.Conditions, func(cond corev1.NodeCondition) bool {
			return cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
		}) {
			break
		}
		select {
		case <-n.kubelet.exited:
			return fmt.Errorf("kubelet exited (%v); see %s", n.kubelet.err, n.kubelet.logPath)
		case <-waitCtx.Done():
			return fmt.Errorf("waiting for node %s to be Ready: %w; see %s", c.NodeName, waitCtx.Err(), n.kubelet.logPath)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return c.untaintNode(ctx, clientset)
}
